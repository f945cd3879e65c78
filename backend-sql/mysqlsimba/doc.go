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
// MySQL has no LISTEN/NOTIFY, so this backend does not implement
// driver.Broadcaster: candidates poll (every renewInterval/2 plus jitter),
// as the specification says for SQL.
//
// Tokens rise strictly per name and survive releases (a released lease
// keeps its row and token) and even an emptied table (new rows start from
// the clock in microseconds); see docs/adr/0031-sql-tokens.md.
package mysqlsimba
