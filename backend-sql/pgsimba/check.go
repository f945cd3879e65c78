package pgsimba

import (
	"context"
	"fmt"
)

// CheckServer reads the server's settings and returns what an operator
// should fix, as warnings (never an error for a setting; an error only if
// the settings cannot be read). Simba's routines make every commit that
// grants or extends a belief (open, renew, acquire, a loss noted) wait for
// at least a local WAL flush, whatever synchronous_commit says (ADR 0160),
// but some losses they cannot prevent:
//
//   - fsync off: the flush reaches the kernel only, so an operating
//     system crash or power loss loses commits the backend acknowledged;
//     a session's renewal or a lease then vanishes while its holder
//     believes in it, and another process acquires inside its term.
//   - standbys replicating asynchronously (synchronous_standby_names
//     empty): a failover to one loses the commits it had not received,
//     with the same effect.
//
// CheckServer is not called by [New]; run it at start-up, or from a
// health check, and log what it returns.
func (b *Backend) CheckServer(ctx context.Context) (warnings []string, err error) {
	var s serverSettings
	err = b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_standby_names'),
       (SELECT count(*) FROM pg_stat_replication)`).Scan(&s.fsync, &s.syncStandbys, &s.standbys)
	if err != nil {
		return nil, fmt.Errorf("pgsimba: check server: %w", err)
	}
	return s.warnings(), nil
}

type serverSettings struct {
	fsync, syncStandbys string
	standbys            int64
}

func (s serverSettings) warnings() []string {
	var w []string
	if s.fsync == "off" {
		w = append(w, "fsync is off: a commit reaches the kernel, not the disk, so an operating system crash or power loss loses commits already acknowledged (a renewal, a grant), and another process may acquire a lease while its holder still believes in it; Simba cannot prevent this: set fsync on")
	}
	if s.standbys > 0 && s.syncStandbys == "" {
		w = append(w, fmt.Sprintf("%d standby(s) replicating asynchronously (synchronous_standby_names is empty): a failover to one loses the commits it had not received (a renewal, a grant), and another process may acquire a lease while its holder still believes in it; list them in synchronous_standby_names, or fail over only after the maximum lease has passed", s.standbys))
	}
	return w
}
