package mysqlsimba_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// The tests of schema version 5 (ADR 0252). prefix is always a fresh
// valid prefix (sqltest.FreshPrefix), the only text placed into SQL.

func newBackendWith(t *testing.T, db *sql.DB, opts ...mysqlsimba.Option) (*mysqlsimba.Backend, string) {
	t.Helper()
	prefix := sqltest.FreshPrefix()
	b, err := mysqlsimba.New(ctxT(t), db, append([]mysqlsimba.Option{mysqlsimba.WithNamespace(prefix)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		dropSchema(t, db, prefix)
	})
	return b, prefix
}

func myRows(t testing.TB, db *sql.DB, prefix string) (leases, sessions int) {
	t.Helper()
	if err := db.QueryRowContext(ctxT(t), "SELECT (SELECT COUNT(*) FROM "+prefix+"_leases), (SELECT COUNT(*) FROM "+prefix+"_sessions)").Scan(&leases, &sessions); err != nil {
		t.Fatal(err)
	}
	return leases, sessions
}

// myNow is the server's clock in µs since 1970.
func myNow(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var us int64
	if err := db.QueryRowContext(ctxT(t), "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))").Scan(&us); err != nil {
		t.Fatal(err)
	}
	return us
}

// myExpiry is the session's expiry in µs since 1970, by the server.
func myExpiry(t testing.TB, db *sql.DB, prefix string, id driver.ID) int64 {
	t.Helper()
	var us int64
	if err := db.QueryRowContext(ctxT(t), "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) FROM "+prefix+"_sessions WHERE id = ?", string(id)).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return us
}

func myUntil(t testing.TB, db *sql.DB, us int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for myNow(t, db) <= us {
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock did not pass %d", us)
		}
		<-time.After(20 * time.Millisecond)
	}
}

func myAcquire(t testing.TB, b driver.Backend, id driver.ID, name string, delay time.Duration) uint64 {
	t.Helper()
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{name}, LockDelay: delay})
	if err != nil || len(rep.Results) != 1 || rep.Results[0].Err != nil {
		t.Fatalf("Acquire(%s, delay %v) = %+v, %v", name, delay, rep, err)
	}
	return rep.Results[0].Token
}

func release(t testing.TB, b driver.Backend, id driver.ID, name string, tok uint64) {
	t.Helper()
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
		t.Fatal(err)
	}
}

func names(p string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%d", p, i)
	}
	return out
}

// Released names, closed sessions' names and expired sessions' names
// (once an open sweeps) leave no row (issue 23); a batch's tokens come
// back in the order of its names although the routine ran them by bucket.
func TestNamesLeaveNoRow(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db)
	base, baseS := myRows(t, db, prefix)
	for i := range 50 {
		id := sqltest.Open(t, b, time.Minute)
		name := fmt.Sprintf("order:%d", i)
		tok := myAcquire(t, b, id, name, 0)
		if tok == 0 {
			t.Fatalf("%s not granted", name)
		}
		release(t, b, id, name, tok)
		if err := b.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	if l, s := myRows(t, db, prefix); l != base || s != baseS {
		t.Fatalf("after 50 names acquired and released: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
	id := sqltest.Open(t, b, time.Minute)
	batch := names("closed", 100)
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: batch})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := b.Inspect(ctxT(t), driver.InspectRequest{Prefix: "closed:"})
	if err != nil || len(hs) != 100 {
		t.Fatalf("Inspect: %d holders, %v", len(hs), err)
	}
	held := map[string]uint64{}
	for _, h := range hs {
		held[h.Name] = h.Token
	}
	for _, r := range rep.Results {
		if r.Token == 0 || held[r.Name] != r.Token {
			t.Fatalf("%s answered token %d, held under %d", r.Name, r.Token, held[r.Name])
		}
	}
	if err := b.Close(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if l, s := myRows(t, db, prefix); l != base || s != baseS {
		t.Fatalf("after 100 names of a closed session: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
	short := sqltest.Open(t, b, 200*time.Millisecond)
	if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: short, Names: names("expired", 50)}); err != nil {
		t.Fatal(err)
	}
	myUntil(t, db, myExpiry(t, db, prefix, short))
	if err := b.Close(ctxT(t), sqltest.Open(t, b, time.Minute)); err != nil { // its open sweeps
		t.Fatal(err)
	}
	if l, s := myRows(t, db, prefix); l != base || s != baseS {
		t.Fatalf("after 50 names of an expired session and an open: %d lease rows, %d session rows; want %d and %d", l, s, base, baseS)
	}
}

// A name's tokens rise through its bucket's mark: with the mark set far
// above the clock, grants answer above it, each above the last.
func TestTokensRiseThroughTheMark(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db)
	const name = "mark:x"
	if _, err := db.ExecContext(ctxT(t), "UPDATE "+prefix+"_marks SET token = TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) + 1000000000000 WHERE bucket = CONV(LEFT(MD5(?), 3), 16, 10) >> 2", name); err != nil {
		t.Fatal(err)
	}
	var high uint64
	if err := db.QueryRowContext(ctxT(t), "SELECT token FROM "+prefix+"_marks WHERE bucket = CONV(LEFT(MD5(?), 3), 16, 10) >> 2", name).Scan(&high); err != nil {
		t.Fatal(err)
	}
	id := sqltest.Open(t, b, time.Minute)
	prev := high
	for i := range 3 {
		tok := myAcquire(t, b, id, name, 0)
		if tok <= prev {
			t.Fatalf("grant %d: token %d, want above %d (the mark, then the last token)", i, tok, prev)
		}
		prev = tok
		release(t, b, id, name, tok)
	}
}

// The migration from version 4 folds every row's token into its bucket's
// mark before it deletes the released rows; version 4's grants are then
// refused (the CHECK), its releases and closes still run.
func TestMigrationFoldsAndRefusesOlderGrants(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, db, prefix) })
	stmts, err := mysqlsimba.SchemaAt(prefix, 4)
	if err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, "INSERT INTO "+prefix+"_epoch VALUES (1, UTC_TIMESTAMP(6))")
	for _, s := range stmts {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	old := driver.ID(strings.Repeat("ab", 16))
	oldAcquire := func(name string) (string, error) {
		var out string
		err := db.QueryRowContext(ctxT(t), "CALL "+prefix+"_acquire_v2(?, ?, 1000000, 5000)", string(old), name).Scan(&out)
		return out, err
	}
	if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_open_v3(?, 60000000, '', 1000000, 5000)", string(old)); err != nil {
		t.Fatal(err)
	}
	out, err := oldAcquire("fold:a,fold:b")
	if err != nil {
		t.Fatal(err)
	}
	var tokB uint64
	if _, err := fmt.Sscanf(strings.Split(out, ",")[1], "%d", &tokB); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctxT(t), "UPDATE "+prefix+"_leases SET token = token + 1000000000000 WHERE name = 'fold:a'"); err != nil {
		t.Fatal(err)
	}
	var high uint64
	if err := db.QueryRowContext(ctxT(t), "SELECT token FROM "+prefix+"_leases WHERE name = 'fold:a'").Scan(&high); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_release_v2(?, 'fold:a', ?, 5000)", string(old), fmt.Sprint(high)); err != nil {
		t.Fatal(err)
	}
	b, err := mysqlsimba.New(ctxT(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	var rows int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = 'fold:a'").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the released row is still there after the migration (%d, %v)", rows, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var holder driver.ID
	for {
		id := sqltest.Open(t, b, time.Second)
		holder = id
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"fold:a"}})
		if err != nil {
			t.Fatal(err)
		}
		if tok := rep.Results[0].Token; tok != 0 {
			if tok <= high {
				t.Fatalf("fold:a granted %d after the migration, want above its last token %d", tok, high)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fold:a not granted: %+v", rep)
		}
		<-time.After(50 * time.Millisecond) // the upgrade's quarantine (1s)
	}
	// Older grants are refused loudly: a new name (an insert), and a
	// takeover of a row version 5 wrote (its holder's session gone).
	if _, err := db.ExecContext(ctxT(t), "DELETE FROM "+prefix+"_sessions WHERE id = ?", string(holder)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"old:new", "fold:a"} {
		_, err := oldAcquire(n)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || !strings.Contains(me.Message, prefix+"_grants_v5") {
			t.Errorf("acquire_v2 of %s on version 5: %v, want the CHECK %s_grants_v5 failed", n, err, prefix)
		}
	}
	// The older session's release and close still run.
	if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_release_v2(?, 'fold:b', ?, 5000)", string(old), fmt.Sprint(tokB)); err != nil {
		t.Fatalf("release_v2 on version 5: %v", err)
	}
	if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_close_v2(?, 5000)", string(old)); err != nil {
		t.Fatalf("close_v2 on version 5: %v", err)
	}
	id := sqltest.Open(t, b, time.Second)
	if tok := myAcquire(t, b, id, "fold:b", 0); tok <= tokB {
		t.Fatalf("fold:b after the old release: %d, want above %d", tok, tokB)
	}
}

// The lock-delay (issue 25), as on PostgreSQL (ADR 0251).
func TestLockDelay(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db, mysqlsimba.WithMaxLockDelay(2*time.Second))
	const delay = 1500 * time.Millisecond
	other := sqltest.Open(t, b, time.Minute)

	t.Run("Expiry", func(t *testing.T) {
		a := sqltest.Open(t, b, 300*time.Millisecond)
		tok := myAcquire(t, b, a, "d:exp", delay)
		exp := myExpiry(t, db, prefix, a)
		myUntil(t, db, exp)
		refused := 0
		for {
			got := myAcquire(t, b, other, "d:exp", 0)
			now := myNow(t, db)
			if got != 0 {
				if now < exp+delay.Microseconds() {
					t.Fatalf("granted %dµs after the expiry, inside the delay %v", now-exp, delay)
				}
				if got <= tok {
					t.Fatalf("granted %d after the delay, want above %d", got, tok)
				}
				break
			}
			refused++
			if now > exp+(delay+5*time.Second).Microseconds() {
				t.Fatal("still refused long after the delay")
			}
			<-time.After(50 * time.Millisecond)
		}
		if refused == 0 {
			t.Fatal("never refused after the expiry: no lock-delay")
		}
	})
	t.Run("ReleaseAndCloseSkipIt", func(t *testing.T) {
		a := sqltest.Open(t, b, time.Minute)
		tok := myAcquire(t, b, a, "d:rel", delay)
		release(t, b, a, "d:rel", tok)
		if got := myAcquire(t, b, other, "d:rel", 0); got <= tok {
			t.Fatalf("after a release: %d, want a grant above %d at once", got, tok)
		}
		tok = myAcquire(t, b, a, "d:close", delay)
		if err := b.Close(ctxT(t), a); err != nil {
			t.Fatal(err)
		}
		if got := myAcquire(t, b, other, "d:close", 0); got <= tok {
			t.Fatalf("after a close: %d, want a grant above %d at once", got, tok)
		}
	})
	t.Run("SessionRowGone", func(t *testing.T) {
		a := sqltest.Open(t, b, time.Minute)
		myAcquire(t, b, a, "d:gone", delay)
		if _, err := db.ExecContext(ctxT(t), "DELETE FROM "+prefix+"_sessions WHERE id = ?", string(a)); err != nil {
			t.Fatal(err)
		}
		first := myNow(t, db)
		if got := myAcquire(t, b, other, "d:gone", 0); got != 0 {
			t.Fatalf("granted %d at once after the session's row went", got)
		}
		for myAcquire(t, b, other, "d:gone", 0) == 0 {
			if myNow(t, db) > first+(delay+5*time.Second).Microseconds() {
				t.Fatal("still refused long after the delay")
			}
			<-time.After(50 * time.Millisecond)
		}
		if now := myNow(t, db); now < first+delay.Microseconds() {
			t.Fatalf("granted %dµs after the first look, inside the delay", now-first)
		}
	})
	t.Run("SweptAfterTheDelay", func(t *testing.T) {
		base, _ := myRows(t, db, prefix)
		a := sqltest.Open(t, b, 200*time.Millisecond)
		myAcquire(t, b, a, "d:sweep", delay)
		// A name of the same session without a delay: the sweep takes the
		// session for it, and must still keep the delayed one.
		myAcquire(t, b, a, "d:sweep0", 0)
		exp := myExpiry(t, db, prefix, a)
		myUntil(t, db, exp)
		if err := b.Close(ctxT(t), sqltest.Open(t, b, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if l, _ := myRows(t, db, prefix); l != base+1 {
			t.Fatalf("%d lease rows inside the delay, want the delayed one kept, the other swept (%d)", l, base+1)
		}
		if got := myAcquire(t, b, other, "d:sweep", 0); got != 0 {
			t.Fatalf("granted %d inside the delay after a sweep", got)
		}
		myUntil(t, db, exp+delay.Microseconds())
		if err := b.Close(ctxT(t), sqltest.Open(t, b, time.Minute)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctxT(t), "SELECT (SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = 'd:sweep') + (SELECT COUNT(*) FROM "+prefix+"_sessions WHERE id = ?)", string(a)).Scan(&n); err != nil || n != 0 {
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

// The marks lost alone: the next grant finds its bucket missing and the
// namespace is quarantined, then grants above the last token.
func TestMarksLostQuarantine(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db, mysqlsimba.WithMaxLease(time.Second))
	id := sqltest.Open(t, b, time.Second)
	tok := myAcquire(t, b, id, "m:1", 0)
	release(t, b, id, "m:1", tok)
	if _, err := db.ExecContext(ctxT(t), "DELETE FROM "+prefix+"_marks"); err != nil {
		t.Fatal(err)
	}
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"m:1"}})
	if err != nil || rep.Quarantine <= 0 || rep.Results[0].Token != 0 {
		t.Fatalf("acquire after the marks were lost: %+v, %v; want a quarantine and no grant", rep, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := myAcquire(t, b, sqltest.Open(t, b, time.Second), "m:1", 0)
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
