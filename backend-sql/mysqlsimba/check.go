package mysqlsimba

import (
	"context"
	"fmt"
)

// CheckServer reads the server's settings and returns what an operator
// should fix, as warnings (never an error for a setting; an error only if
// the settings cannot be read). InnoDB decides for the whole server when a
// commit's redo log reaches the disk (innodb_flush_log_at_trx_commit, a
// global variable), so Simba's routines cannot make their own commits
// durable as they do on PostgreSQL (ADR 0160):
//
//   - innodb_flush_log_at_trx_commit = 0: the log is written and flushed
//     about once a second, so a crash of mysqld alone loses up to a second
//     of acknowledged commits; a session's renewal or a lease then
//     vanishes while its holder believes in it, and another process
//     acquires inside its term.
//   - innodb_flush_log_at_trx_commit = 2: the log is written at each
//     commit and flushed about once a second, so a crash of mysqld alone
//     loses nothing, but an operating system crash or power loss loses up
//     to a second, with the same effect.
//
// 1 (and MariaDB's 3) flush at each commit. CheckServer is not called by
// [New]; run it at start-up, or from a health check, and log what it
// returns.
func (b *Backend) CheckServer(ctx context.Context) (warnings []string, err error) {
	var flush string
	if err := b.db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit").Scan(&flush); err != nil {
		return nil, fmt.Errorf("mysqlsimba: check server: %w", err)
	}
	return flushWarnings(flush), nil
}

func flushWarnings(flush string) []string {
	switch flush {
	case "0":
		return []string{"innodb_flush_log_at_trx_commit is 0: the redo log is written and flushed about once a second, so a crash of mysqld loses up to a second of acknowledged commits (a renewal, a grant), and another process may acquire a lease while its holder still believes in it; Simba cannot prevent this: set it to 1"}
	case "2":
		return []string{"innodb_flush_log_at_trx_commit is 2: the redo log is flushed about once a second, so an operating system crash or power loss (not a crash of mysqld alone) loses up to a second of acknowledged commits (a renewal, a grant), and another process may acquire a lease while its holder still believes in it; Simba cannot prevent this: set it to 1"}
	}
	return nil
}
