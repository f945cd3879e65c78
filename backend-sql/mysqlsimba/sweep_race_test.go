package mysqlsimba_test

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// The races of open_v4's sweep, release_v4 and close_v3 with the other
// routines (found by review "revmy"). A test transaction stands in for a
// routine between two of its statements where the race needs one there,
// and says which routine's statements it runs; the routines under test
// are called directly (CALL), so that a deadlock (1213) reaches the test
// instead of the backend's retries.

// rawID is a new session id as the backend makes them.
func rawID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// bucketOf is a name's mark, as acquire_v4 computes it.
func bucketOf(name string) int {
	h := md5.Sum([]byte(name))
	return (int(h[0])<<4 | int(h[1])>>4) >> 2
}

// call runs a routine on a connection of its own and reports its error
// on the channel returned.
func call(ctx context.Context, db *sql.DB, q string, args ...any) <-chan error {
	done := make(chan error, 1)
	go func() {
		rows, err := db.QueryContext(ctx, q, args...)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			if cerr := rows.Close(); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	return done
}

// lockTx begins a transaction and runs q in it (a locking read), and
// returns the transaction.
func lockTx(t *testing.T, db *sql.DB, q string, args ...any) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var n int
	if err := tx.QueryRowContext(ctxT(t), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return tx
}

// waiters is how many transactions wait for a lock in a statement on
// the namespace's tables, by SHOW ENGINE INNODB STATUS: the
// information_schema's INNODB_TRX is a cache that reads less than 100ms
// apart (any client's) keep from being refreshed.
func waiters(t *testing.T, db *sql.DB, prefix string) int {
	t.Helper()
	var typ, name, status string
	if err := db.QueryRowContext(ctxT(t), "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, trx := range strings.Split(status, "---TRANSACTION ")[1:] {
		if strings.Contains(trx, "LOCK WAIT") && strings.Contains(trx, prefix+"_") {
			n++
		}
	}
	return n
}

// untilWaiting polls until n transactions wait on the namespace's locks,
// or until one of the calls given has ended (it did not wait: false).
func untilWaiting(t *testing.T, db *sql.DB, prefix string, n int, calls ...<-chan error) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for waiters(t, db, prefix) < n {
		for _, c := range calls {
			if len(c) > 0 {
				return false
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d transactions wait after 10s", n)
		}
		<-time.After(5 * time.Millisecond)
	}
	return true
}

func leaseRow(t *testing.T, db *sql.DB, prefix, name string) (owner string, ok bool) {
	t.Helper()
	err := db.QueryRowContext(ctxT(t), "SELECT session_id FROM "+prefix+"_leases WHERE name = ? AND held = 1", name).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return owner, true
}

// A renewal that found its session alive just before the expiry commits
// after an open's sweep read the session as expired: the sweep deleted
// the lease rows of the session the renewal had just extended, and
// another session was granted its name while it held it. The
// transaction below is renew_v2 between its check (the session row
// locked, alive) and its commit. The session is the sweep's second
// candidate (another expired before it), whose transaction is not the
// one that read the candidates.
func TestSweepWaitsForARenewalInFlight(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db)
	other := sqltest.Open(t, b, time.Minute)
	a, first := sqltest.Open(t, b, time.Second), sqltest.Open(t, b, time.Second)
	if a < first {
		a, first = first, a
	}
	myAcquire(t, b, first, "first", 0)
	if tok := myAcquire(t, b, a, "renewed", 0); tok == 0 {
		t.Fatal("renewed not granted")
	}
	renew := lockTx(t, db, "SELECT COUNT(*) FROM "+prefix+"_sessions WHERE id = ? AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE", string(a))
	myUntil(t, db, max(myExpiry(t, db, prefix, a), myExpiry(t, db, prefix, first)))
	if _, err := renew.ExecContext(ctxT(t), "UPDATE "+prefix+"_sessions SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id = ?", string(a)); err != nil {
		t.Fatal(err)
	}
	open := call(ctxT(t), db, "CALL "+prefix+"_open_v4(?, 60000000, '', 1000000, 10000)", rawID(t))
	untilWaiting(t, db, prefix, 1, open)
	if err := renew.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-open; err != nil {
		t.Fatal(err)
	}
	if _, ok := leaseRow(t, db, prefix, "first"); ok {
		t.Error("the first candidate's row is still there: the sweep did not reach it")
	}
	if owner, ok := leaseRow(t, db, prefix, "renewed"); !ok || owner != string(a) {
		t.Errorf("the renewed session's lease row: owner %q, held %v; want it kept", owner, ok)
	}
	if got := myAcquire(t, b, other, "renewed", 0); got != 0 {
		t.Fatalf("granted %d to another session while the renewed session holds it: the sweep deleted a live session's row", got)
	}
}

// A release or a close that waits for a lease row's lock (another
// session's acquire holds it while it looks at the holder) across the
// session's expiry, then deletes the row, cuts the lock-delay short
// (ADR 0285) as a release that arrived after the expiry would:
// release_v4 and close_v3 read whether the session lives before the
// wait. The transaction below is that acquire (acquire_v4's lock of the
// name's row).
func TestReleaseOrCloseWaitingAcrossTheExpiryKeepsTheDelay(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db, mysqlsimba.WithMaxLockDelay(5*time.Second))
	const delay = 3 * time.Second
	for _, how := range []string{"Release", "Close"} {
		t.Run(how, func(t *testing.T) {
			// The call must begin to wait before the session expires; on a
			// loaded machine a one-second session may not last that long,
			// so a longer one is tried rather than nothing shown.
			for i, lease := range []time.Duration{time.Second, 4 * time.Second, 15 * time.Second} {
				if myWaitAcrossTheExpiry(t, b, db, prefix, "waited:"+how+":"+strconv.Itoa(i), how, lease, delay) {
					return
				}
			}
			t.Fatalf("even a 15 s session expired before the %s began to wait for the row's lock", how)
		})
	}
}

// myWaitAcrossTheExpiry runs one try of the test above; it reports
// false, having shown nothing, when the session expired before the call
// began to wait.
func myWaitAcrossTheExpiry(t *testing.T, b driver.Backend, db *sql.DB, prefix, name, how string, lease, delay time.Duration) bool {
	t.Helper()
	a := sqltest.Open(t, b, lease)
	tok := myAcquire(t, b, a, name, delay)
	exp := myExpiry(t, db, prefix, a)
	acq := lockTx(t, db, "SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = ? FOR UPDATE", name)
	var done <-chan error
	if how == "Close" {
		done = call(ctxT(t), db, "CALL "+prefix+"_close_v3(?, 10000)", string(a))
	} else {
		done = call(ctxT(t), db, "CALL "+prefix+"_release_v5(?, ?, ?, 10000)", string(a), name, tok)
	}
	if !untilWaiting(t, db, prefix, 1, done) {
		t.Fatalf("the %s did not wait for the row's lock: %v", how, <-done)
	}
	if myNow(t, db) >= exp {
		_ = acq.Rollback()
		<-done
		return false
	}
	myUntil(t, db, exp)
	if err := acq.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	other := sqltest.Open(t, b, time.Minute)
	if got, now := myAcquire(t, b, other, name, 0), myNow(t, db); got != 0 && now < exp+delay.Microseconds() {
		t.Fatalf("granted %d %dµs after the expiry, inside the delay %v: the %s that waited across the expiry cut it short", got, now-exp, delay, how)
	}
	return true
}

// The routines that delete an expired session's rows, open_v4's sweep
// and close_v3 (a close after the expiry), take them in the order
// acquires and releases lock names in, (bucket, name): in the index's
// order (by name) the sweep deadlocked with an acquire that takes over
// two of the session's names and with a late release of both, and so
// did a late close with the acquire; and each session is swept in a
// transaction of its own, or the sweep holds one session's row while it
// waits for another's. The transaction below holds the first name's row
// (another acquire's look at it) until both wait.
func TestExpiredSessionsRowsGoInTheOrderOfAcquires(t *testing.T) {
	p, q := "o:2", "o:3" // p < q, but q's bucket comes first
	if !(p < q && bucketOf(q) < bucketOf(p)) {
		t.Fatalf("buckets %d, %d: the names no longer show the order", bucketOf(p), bucketOf(q))
	}
	for _, how := range []string{"SweepAndAcquire", "SweepAndRelease", "CloseAndAcquire", "SweepOfTwoSessionsAndAcquire"} {
		t.Run(how, func(t *testing.T) {
			db := newDB(t, dsn(t), nil)
			b, prefix := newBackendWith(t, db)
			other := sqltest.Open(t, b, time.Minute) // before the expiries: an open sweeps
			e := sqltest.Open(t, b, 300*time.Millisecond)
			var rep driver.AcquireReply
			if how == "SweepOfTwoSessionsAndAcquire" {
				// p's holder is swept first (ids in order), then q's.
				e2 := sqltest.Open(t, b, 300*time.Millisecond)
				if e2 < e {
					e, e2 = e2, e
				}
				myAcquire(t, b, e, p, 0)
				myAcquire(t, b, e2, q, 0)
				myUntil(t, db, myExpiry(t, db, prefix, e2))
			} else {
				var err error
				rep, err = b.Acquire(ctxT(t), driver.AcquireRequest{ID: e, Names: []string{p, q}})
				if err != nil || rep.Results[0].Token == 0 || rep.Results[1].Token == 0 {
					t.Fatalf("%+v, %v", rep, err)
				}
			}
			myUntil(t, db, myExpiry(t, db, prefix, e))
			look := lockTx(t, db, "SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = ? FOR UPDATE", p)
			calls := map[string]<-chan error{}
			if how == "CloseAndAcquire" {
				calls["close"] = call(ctxT(t), db, "CALL "+prefix+"_close_v3(?, 10000)", string(e))
			} else {
				calls["open"] = call(ctxT(t), db, "CALL "+prefix+"_open_v4(?, 60000000, '', 1000000, 10000)", rawID(t))
			}
			for _, c := range calls {
				untilWaiting(t, db, prefix, 1, c)
			}
			if how == "SweepAndRelease" {
				calls["release"] = call(ctxT(t), db, "CALL "+prefix+"_release_v5(?, ?, ?, 10000)", string(e), q+","+p,
					strconv.FormatUint(rep.Results[1].Token, 10)+","+strconv.FormatUint(rep.Results[0].Token, 10))
			} else {
				calls["acquire"] = call(ctxT(t), db, "CALL "+prefix+"_acquire_v5(?, ?, 1000000, 10000, 0)", string(other), q+","+p)
			}
			var all []<-chan error
			for _, c := range calls {
				all = append(all, c)
			}
			untilWaiting(t, db, prefix, 2, all...)
			if err := look.Rollback(); err != nil {
				t.Fatal(err)
			}
			for what, c := range calls {
				if err := <-c; err != nil {
					t.Errorf("%s: %v", what, err)
				}
			}
		})
	}
}
