package pgsimba_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

// The tests of schema version 7 (ADR 0250, 0251). prefix is always a
// fresh valid prefix (sqltest.FreshPrefix), the only text placed into SQL.

// delayBackend is a backend in a fresh namespace with a maximum
// lock-delay, dropped when t ends.
func delayBackend(t *testing.T, pool *pgxpool.Pool, maxDelay time.Duration) (*pgsimba.Backend, string) {
	t.Helper()
	prefix := sqltest.FreshPrefix()
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithMaxLockDelay(maxDelay))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		dropSchema(t, pool, prefix)
	})
	return b, prefix
}

// leaseRows counts the rows of the namespace's leases table (the '~epoch'
// marker among them).
func leaseRows(t testing.TB, pool *pgxpool.Pool, prefix string) (leases, sessions int) {
	t.Helper()
	if err := pool.QueryRow(ctxT(t), "SELECT (SELECT count(*) FROM "+prefix+"_leases), (SELECT count(*) FROM "+prefix+"_sessions)").Scan(&leases, &sessions); err != nil {
		t.Fatal(err)
	}
	return leases, sessions
}

func acquireDelay(t testing.TB, b driver.Backend, id driver.ID, name string, delay time.Duration) uint64 {
	t.Helper()
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{name}, LockDelay: delay})
	if err != nil || len(rep.Results) != 1 || rep.Results[0].Err != nil {
		t.Fatalf("Acquire(%s, delay %v) = %+v, %v", name, delay, rep, err)
	}
	return rep.Results[0].Token
}

// dbNow is the database's clock.
func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(ctxT(t), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// expiresAt is the session's expiry on the database's clock.
func expiresAt(t testing.TB, pool *pgxpool.Pool, prefix string, id driver.ID) time.Time {
	t.Helper()
	var exp time.Time
	if err := pool.QueryRow(ctxT(t), "SELECT expires_at FROM "+prefix+"_sessions WHERE id = $1", string(id)).Scan(&exp); err != nil {
		t.Fatal(err)
	}
	return exp
}

// untilDB polls until the database's clock has passed at.
func untilDB(t testing.TB, pool *pgxpool.Pool, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !dbNow(t, pool).After(at) {
		if time.Now().After(deadline) {
			t.Fatalf("the database's clock did not pass %v", at)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// Released names, closed sessions' names and expired sessions' names
// (once an open sweeps) leave no row: 300 names used once, and the
// tables are back to their markers (issue 23).
func TestNamesLeaveNoRow(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	base, baseS := leaseRows(t, pool, prefix)
	for i := range 100 {
		id := open(t, b, time.Minute)
		name := fmt.Sprintf("order:%d", i)
		tok := acquire(t, b, id, name)
		if tok == 0 {
			t.Fatalf("%s not granted", name)
		}
		if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	if l, s := leaseRows(t, pool, prefix); l != base || s != baseS {
		t.Fatalf("after 100 names acquired and released: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
	id := open(t, b, time.Minute)
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: batchNames("closed", 100)})
	if err != nil || rep.Results[99].Token == 0 {
		t.Fatalf("batch: %v", err)
	}
	if err := b.Close(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if l, s := leaseRows(t, pool, prefix); l != base || s != baseS {
		t.Fatalf("after 100 names of a closed session: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
	short := open(t, b, 200*time.Millisecond)
	if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: short, Names: batchNames("expired", 100)}); err != nil {
		t.Fatal(err)
	}
	untilDB(t, pool, expiresAt(t, pool, prefix, short))
	sweeper := open(t, b, time.Minute) // its open sweeps the expired session
	if err := b.Close(ctxT(t), sweeper); err != nil {
		t.Fatal(err)
	}
	if l, s := leaseRows(t, pool, prefix); l != base || s != baseS {
		t.Fatalf("after 100 names of an expired session and an open: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
	var marks int
	if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+prefix+"_marks").Scan(&marks); err != nil || marks != 1024 {
		t.Fatalf("%d marks (%v), want 1024 whatever the names", marks, err)
	}
}

func batchNames(p string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%d", p, i)
	}
	return out
}

// A name's tokens rise through its bucket's mark, not the clock alone:
// with the mark set far above the clock, a grant answers above it, and
// the next grant after a release (which deleted the row) above that.
func TestTokensRiseThroughTheMark(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	const name = "mark:x"
	var high int64
	if err := pool.QueryRow(ctxT(t), "UPDATE "+prefix+"_marks SET token = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 1000000000000 WHERE bucket = ('x' || substr(md5($1), 1, 3))::bit(12)::integer >> 2 RETURNING token", name).Scan(&high); err != nil {
		t.Fatal(err)
	}
	id := open(t, b, time.Minute)
	var prev uint64
	for i := range 3 {
		tok := acquire(t, b, id, name)
		if tok <= uint64(high) || tok <= prev {
			t.Fatalf("grant %d: token %d, want above the mark %d and the last token %d", i, tok, high, prev)
		}
		prev = tok
		if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A takeover from an expired session counts from the mark too.
	short := open(t, b, 200*time.Millisecond)
	tok := acquire(t, b, short, name)
	if tok <= prev {
		t.Fatalf("grant to the short session: %d, want above %d", tok, prev)
	}
	untilDB(t, pool, expiresAt(t, pool, prefix, short))
	if got := acquire(t, b, id, name); got <= tok {
		t.Fatalf("takeover: token %d, want above %d", got, tok)
	}
}

// The migration to version 7 folds every row's token into its bucket's
// mark (by the same hash as the grants) before it deletes the released
// rows: a name released under version 6 with a token far above the clock
// is granted above it.
func TestMigrationFoldsTokensIntoMarks(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, pool, prefix) })
	ddl, err := pgsimba.SchemaAt(prefix, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctxT(t), "BEGIN; "+ddl+"; INSERT INTO "+prefix+"_epoch VALUES (1, clock_timestamp()); COMMIT"); err != nil {
		t.Fatal(err)
	}
	old := driver.ID(strings.Repeat("ab", 16))
	if _, err := pool.Exec(ctxT(t), "SELECT "+prefix+"_open_v4($1, 60000000, '', 5000)", string(old)); err != nil {
		t.Fatal(err)
	}
	var toks []int64
	if err := pool.QueryRow(ctxT(t), "SELECT "+prefix+"_acquire_v4($1, $2, 1000000, 5000)", string(old), []string{"fold:a", "fold:b"}).Scan(&toks); err != nil {
		t.Fatal(err)
	}
	var high int64
	if err := pool.QueryRow(ctxT(t), "UPDATE "+prefix+"_leases SET token = token + 1000000000000 WHERE name = 'fold:a' RETURNING token").Scan(&high); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctxT(t), "SELECT "+prefix+"_release_v3($1, $2, $3, 5000)", string(old), []string{"fold:a"}, []int64{high}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("release_v3: %d, %v", n, err)
	}
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	var rows int
	if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+prefix+"_leases WHERE name = 'fold:a'").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the released row is still there after the migration (%d, %v)", rows, err)
	}
	id := open(t, b, time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"fold:a"}})
		if err != nil {
			t.Fatal(err)
		}
		if tok := rep.Results[0].Token; tok != 0 {
			if tok <= uint64(high) {
				t.Fatalf("fold:a granted %d after the migration, want above its last token %d", tok, high)
			}
			break
		}
		if time.Now().After(deadline) || rep.Quarantine == 0 {
			t.Fatalf("fold:a not granted: %+v", rep)
		}
		<-time.After(50 * time.Millisecond) // the upgrade's quarantine (1s)
	}
	// fold:b is still held by the old session, whose release still runs.
	if tok := acquire(t, b, id, "fold:b"); tok != 0 {
		t.Fatalf("fold:b, held by the old session, granted %d", tok)
	}
	if err := pool.QueryRow(ctxT(t), "SELECT "+prefix+"_release_v3($1, $2, $3, 5000)", string(old), []string{"fold:b"}, []int64{toks[1]}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("old release_v3 on version 7: %d, %v", n, err)
	}
	if tok := acquire(t, b, id, "fold:b"); tok <= uint64(toks[1]) {
		t.Fatalf("fold:b after the old release: %d, want above %d", tok, toks[1])
	}
	// The refusal above marked fold:b waited for; the old release
	// notified and kept the row, so the grant of that row clears the mark
	// (ADR 0162: the next release notifies only after a new refusal).
	var waited bool
	if err := pool.QueryRow(ctxT(t), "SELECT waited FROM "+prefix+"_leases WHERE name = 'fold:b'").Scan(&waited); err != nil || waited {
		t.Fatalf("fold:b's waited mark after a grant of the row an old release left: %v (%v), want cleared", waited, err)
	}
}

// On version 7 the older routines' grants are refused loudly (SQLSTATE
// SX003): they would take tokens from rows that a release no longer
// keeps. Their opens, releases and closes still run.
func TestOlderGrantsRefusedOnVersion7(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	old := driver.ID(strings.Repeat("cd", 16))
	if _, err := pool.Exec(ctxT(t), "SELECT "+prefix+"_open_v4($1, 60000000, '', 5000)", string(old)); err != nil {
		t.Fatalf("old open on version 7: %v", err)
	}
	id := open(t, b, time.Minute)
	tok := acquire(t, b, id, "old:held")
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "old:held", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT " + prefix + "_acquire_v4($1, ARRAY['old:new'], 1000000, 5000)",
		"SELECT " + prefix + "_acquire_v4($1, ARRAY['old:held'], 1000000, 5000)",
		"SELECT r_token FROM " + prefix + "_acquire_v3($1, ARRAY['old:new'], 1000000, 5000)",
		"SELECT r_token FROM " + prefix + "_acquire_v1($1, ARRAY['old:new'])",
	} {
		_, err := pool.Exec(ctxT(t), q, string(old))
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "SX003" || !strings.Contains(pe.Message, "upgrade") {
			t.Errorf("%s on version 7: %v, want SQLSTATE SX003 saying to upgrade", q, err)
		}
	}
	if tok := acquire(t, b, id, "old:new"); tok == 0 {
		t.Fatal("old:new not granted after the older grants were refused")
	}
	var n int
	if err := pool.QueryRow(ctxT(t), "SELECT "+prefix+"_close_v3($1, 5000)", string(old)).Scan(&n); err != nil {
		t.Fatalf("old close on version 7: %v", err)
	}
}

// The lock-delay (issue 25): a name whose owner's session expired stays
// refused until the database's clock passes the session's expiry plus
// the delay, then is granted above the last token; a release or a close
// frees it at once; a delay above WithMaxLockDelay is refused whole.
func TestLockDelay(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b, prefix := delayBackend(t, pool, 2*time.Second)
	const delay = 1500 * time.Millisecond
	other := open(t, b, time.Minute)

	t.Run("Expiry", func(t *testing.T) {
		a := open(t, b, 300*time.Millisecond)
		tok := acquireDelay(t, b, a, "d:exp", delay)
		exp := expiresAt(t, pool, prefix, a)
		untilDB(t, pool, exp)
		refused := 0
		for {
			got := acquire(t, b, other, "d:exp")
			now := dbNow(t, pool)
			if got != 0 {
				if now.Before(exp.Add(delay)) {
					t.Fatalf("granted at %v, before the expiry %v + the delay %v", now, exp, delay)
				}
				if got <= tok {
					t.Fatalf("granted %d after the delay, want above %d", got, tok)
				}
				break
			}
			refused++
			if now.After(exp.Add(delay + 5*time.Second)) {
				t.Fatalf("still refused %v after the expiry", now.Sub(exp))
			}
			<-time.After(50 * time.Millisecond)
		}
		if refused == 0 {
			t.Fatal("never refused after the expiry: no lock-delay")
		}
	})
	t.Run("ReleaseSkipsIt", func(t *testing.T) {
		a := open(t, b, time.Minute)
		tok := acquireDelay(t, b, a, "d:rel", delay)
		if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "d:rel", Token: tok}}}); err != nil {
			t.Fatal(err)
		}
		if got := acquire(t, b, other, "d:rel"); got <= tok {
			t.Fatalf("after a release: %d, want a grant above %d at once", got, tok)
		}
	})
	t.Run("CloseSkipsIt", func(t *testing.T) {
		a := open(t, b, time.Minute)
		tok := acquireDelay(t, b, a, "d:close", delay)
		if err := b.Close(ctxT(t), a); err != nil {
			t.Fatal(err)
		}
		if got := acquire(t, b, other, "d:close"); got <= tok {
			t.Fatalf("after a close: %d, want a grant above %d at once", got, tok)
		}
	})
	t.Run("SessionRowGone", func(t *testing.T) {
		// An older process's open deletes expired sessions' rows: the
		// delay then counts from the first look that found the row gone.
		a := open(t, b, time.Minute)
		acquireDelay(t, b, a, "d:gone", delay)
		if _, err := pool.Exec(ctxT(t), "DELETE FROM "+prefix+"_sessions WHERE id = $1", string(a)); err != nil {
			t.Fatal(err)
		}
		first := dbNow(t, pool)
		if got := acquire(t, b, other, "d:gone"); got != 0 {
			t.Fatalf("granted %d at once after the session's row went", got)
		}
		for acquire(t, b, other, "d:gone") == 0 {
			if dbNow(t, pool).After(first.Add(delay + 5*time.Second)) {
				t.Fatal("still refused long after the delay")
			}
			<-time.After(50 * time.Millisecond)
		}
		if now := dbNow(t, pool); now.Before(first.Add(delay)) {
			t.Fatalf("granted at %v, before the first look %v + the delay %v", now, first, delay)
		}
	})
	t.Run("SweptAfterTheDelay", func(t *testing.T) {
		base, _ := leaseRows(t, pool, prefix)
		a := open(t, b, time.Second)
		acquireDelay(t, b, a, "d:sweep", delay)
		// A name of the same session without a delay: the sweep takes the
		// session for it, and must still keep the delayed one.
		acquireDelay(t, b, a, "d:sweep0", 0)
		exp := expiresAt(t, pool, prefix, a)
		untilDB(t, pool, exp)
		if err := b.Close(ctxT(t), open(t, b, time.Minute)); err != nil { // an open sweeps
			t.Fatal(err)
		}
		if l, _ := leaseRows(t, pool, prefix); l != base+1 {
			t.Fatalf("%d lease rows inside the delay, want the delayed one kept, the other swept (%d)", l, base+1)
		}
		if got := acquire(t, b, other, "d:sweep"); got != 0 {
			t.Fatalf("granted %d inside the delay after a sweep", got)
		}
		untilDB(t, pool, exp.Add(delay))
		if err := b.Close(ctxT(t), open(t, b, time.Minute)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctxT(t), "SELECT (SELECT count(*) FROM "+prefix+"_leases WHERE name = 'd:sweep') + (SELECT count(*) FROM "+prefix+"_sessions WHERE id = $1)", string(a)).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows of the expired session after its delay and an open (%v), want none", n, err)
		}
	})
	t.Run("AboveTheMaximum", func(t *testing.T) {
		_, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: other, Names: []string{"d:max"}, LockDelay: 3 * time.Second})
		if !errors.Is(err, driver.ErrLockDelay) || !strings.Contains(err.Error(), "2s") {
			t.Fatalf("delay 3s above a maximum of 2s: %v, want ErrLockDelay naming 2s", err)
		}
	})
}

// The marks lost alone (TRUNCATE of <p>_marks): the next grant finds its
// bucket missing and the namespace is quarantined (its tokens would
// otherwise restart below a mark), then grants above the last token.
func TestMarksLostQuarantine(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		dropSchema(t, pool, prefix)
	})
	id := open(t, b, time.Minute)
	tok := acquire(t, b, id, "m:1")
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "m:1", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctxT(t), "TRUNCATE "+prefix+"_marks"); err != nil {
		t.Fatal(err)
	}
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"m:1"}})
	if err != nil || rep.Quarantine <= 0 || rep.Results[0].Token != 0 {
		t.Fatalf("acquire after the marks were lost: %+v, %v; want a quarantine and no grant", rep, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := acquire(t, b, open(t, b, time.Second), "m:1") // a lease of at most 1s: a new session each time
		if got != 0 {
			if got <= tok {
				t.Fatalf("granted %d after the quarantine, want above %d", got, tok)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no grant after the quarantine")
		}
		<-time.After(50 * time.Millisecond)
	}
}

// A sweep frees the names of an expired session: one an acquire was
// refused is announced, as a release would (ADR 0162), so the waiter
// refused before the expiry hears of it.
func TestSweepNotifiesWaiters(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	// 1s: two acquires and a refused waiter fit in it on a loaded machine
	// (200ms expired before the second acquire once).
	a := open(t, b, time.Second)
	if tok := acquire(t, b, a, "sw:waited"); tok == 0 {
		t.Fatal("not granted")
	}
	acquire(t, b, a, "sw:alone")
	waitFor(t, b, "sw:waited")
	untilDB(t, pool, expiresAt(t, pool, prefix, a))
	if err := b.Close(ctxT(t), open(t, b, time.Minute)); err != nil { // an open sweeps
		t.Fatal(err)
	}
	next(t, ch, "notice for sw:waited from the sweep", func(n driver.Notice) bool {
		if n.Name == "sw:alone" {
			t.Errorf("notice for sw:alone, which nobody was refused")
		}
		return n.Name == "sw:waited"
	})
}
