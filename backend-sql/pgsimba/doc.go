// Package pgsimba is the Simba backend for PostgreSQL, through pgx/v5.
//
// [New] takes the user's *pgxpool.Pool ([Connect] takes a connection
// string) and a table prefix (the namespace), and creates two tables and
// five PL/pgSQL functions if they are missing ([Schema] returns the SQL).
// Each backend call is one statement, so one round trip; expiry and the
// remaining duration are computed in SQL from clock_timestamp(), never
// now() (frozen at the transaction's start), and the client never compares
// its clock with a database timestamp.
//
// The backend implements driver.Broadcaster: a release (or a session
// close) of a name that an acquire was refused (a waiting candidate)
// sends pg_notify on [Channel] in the same transaction, and one
// dedicated connection per Backend value LISTENs for it, so a waiting
// candidate takes over at once instead of at its next periodic attempt.
// The listening connection is re-established after a loss, and each time
// it is, subscribers get an empty Notice (notifications are hints; some
// may have been lost) so that every waiting candidate attempts at once.
//
// Tokens rise strictly per name and survive releases and even an emptied
// table, without a row per name: a lease's row lives only while it is
// held, and tokens rise through 1024 high-water marks, one per bucket of
// names (docs/adr/0250-sql-no-row-per-name-tokens-through-marks.md). A
// grant may carry a lock-delay up to WithMaxLockDelay (ADR 0251).
package pgsimba
