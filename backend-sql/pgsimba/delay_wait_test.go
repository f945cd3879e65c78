package pgsimba_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/session/driver"
)

// A release or a close that waits for a lease row's lock (another
// session's acquire holds it while it looks at the holder) across the
// session's expiry, then deletes the row, cuts the lock-delay short
// (ADR 0285) as a late one would (found by review "revmy", as on
// MariaDB): close_v4 read whether the session lives before it locked the
// rows, and release_v4's EXISTS was evaluated before the DELETE waited
// for the row. The transaction below is that acquire (acquire_v5's lock
// of the name's row).
func TestReleaseOrCloseWaitingAcrossTheExpiryKeepsTheDelay(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b, prefix := delayBackend(t, pool, 5*time.Second)
	const delay = 3 * time.Second
	for _, how := range []string{"Release", "Close"} {
		t.Run(how, func(t *testing.T) {
			// The call must begin to wait before the session expires; on a
			// loaded machine a one-second session may not last that long,
			// so a longer one is tried rather than nothing shown.
			for i, lease := range []time.Duration{time.Second, 4 * time.Second, 15 * time.Second} {
				if waitAcrossTheExpiry(t, b, pool, prefix, fmt.Sprintf("waited:%s:%d", how, i), how, lease, delay) {
					return
				}
			}
			t.Fatalf("even a 15 s session expired before the %s began to wait for the row's lock", how)
		})
	}
}

// waitAcrossTheExpiry runs one try of the test above; it reports false,
// having shown nothing, when the session expired before the call began
// to wait.
func waitAcrossTheExpiry(t *testing.T, b driver.Backend, pool *pgxpool.Pool, prefix, name, how string, lease, delay time.Duration) bool {
	t.Helper()
	a := open(t, b, lease)
	tok := acquireDelay(t, b, a, name, delay)
	exp := expiresAt(t, pool, prefix, a)
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctxT(t)) }()
	if _, err := tx.Exec(ctxT(t), "SELECT 1 FROM "+prefix+"_leases WHERE name = $1 FOR UPDATE", name); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		if how == "Close" {
			done <- b.Close(ctxT(t), a)
		} else {
			done <- b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: name, Token: tok}}})
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if len(done) > 0 {
			t.Fatalf("the %s did not wait for the row's lock: %v", how, <-done)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s does not wait after 10s", how)
		}
		<-time.After(5 * time.Millisecond)
	}
	if !dbNow(t, pool).Before(exp) {
		_ = tx.Rollback(ctxT(t))
		<-done
		return false
	}
	untilDB(t, pool, exp)
	if err := tx.Rollback(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	other := open(t, b, time.Minute)
	if got, now := acquire(t, b, other, name), dbNow(t, pool); got != 0 && now.Before(exp.Add(delay)) {
		t.Fatalf("granted %d %v after the expiry, inside the delay %v: the %s that waited across the expiry cut it short", got, now.Sub(exp), delay, how)
	}
	return true
}
