// Package sqlbackend is the Simba backend for PostgreSQL (pgx/v5, with
// LISTEN/NOTIFY release broadcast) and MySQL/MariaDB (database/sql), with
// fencing helpers for users' own tables.
package sqlbackend
