// Package mysqlsimba is the Simba backend for MySQL and MariaDB, through
// database/sql and github.com/go-sql-driver/mysql.
//
// [New] takes the user's *sql.DB and a table prefix (the namespace), and
// creates two tables and five stored procedures if they are missing
// ([Schema] lists them). Each backend call is one prepared CALL, so one
// round trip: the procedures run their own READ COMMITTED transactions and
// read the database clock with UTC_TIMESTAMP(6) after taking their locks.
// The client never compares its clock with a database timestamp: a renewal
// answers the remaining duration, computed in SQL.
//
// MySQL has no LISTEN/NOTIFY, so a [Backend] does not implement
// driver.Broadcaster: candidates poll (every renewInterval/2 plus jitter),
// as the specification says for SQL. A [Notifier] ([NewNotifier]) does, on
// MariaDB: its grants hold a per-name named lock (GET_LOCK) until the
// release commits, and its refused acquisitions wait on it, so a
// candidate hears of a release in about a round trip (ADR 0145). The
// named lock is a wake-up hint only; the leases table alone grants.
//
// Tokens rise strictly per name and survive releases and even an emptied
// table, without a row per name: a lease's row lives only while it is
// held, and tokens rise through 1024 high-water marks, one per bucket of
// names (docs/adr/0250-sql-no-row-per-name-tokens-through-marks.md). A
// grant may carry a lock-delay up to WithMaxLockDelay (ADR 0251).
package mysqlsimba
