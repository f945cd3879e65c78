// Package sqlbackend holds what Simba's SQL backends share with their users:
// the table-prefix rule ([ValidatePrefix]) that names a namespace.
//
// The backends themselves live in sub-packages, one per driver, so a program
// links only the driver it uses:
//
//   - [github.com/simba-go/simba/backend-sql/pgsimba]: PostgreSQL through
//     pgx/v5, with release broadcast over LISTEN/NOTIFY.
//   - [github.com/simba-go/simba/backend-sql/mysqlsimba]: MySQL and MariaDB
//     through database/sql and go-sql-driver/mysql; candidates poll.
//   - [github.com/simba-go/simba/backend-sql/fence]: fencing helpers that
//     guard a user's own write with a term's token, in the user's
//     transaction.
//
// A namespace is a table prefix: two backend values with the same prefix on
// the same database see each other's sessions and leases; different
// prefixes never do. The prefix is the only text ever interpolated into SQL,
// and only after [ValidatePrefix] accepted it; every value is a bind
// parameter. README.md documents the schema and docs/adr/0030-0033 the
// decisions behind it.
package sqlbackend
