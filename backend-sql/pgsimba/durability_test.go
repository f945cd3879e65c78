package pgsimba_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

// TestOnlyReleaseCommitsAsynchronously: the release routine sets
// synchronous_commit = off for its own transaction only (ADR 0034); open,
// renew, acquire and close commit with the connection's setting, and the
// release leaves nothing behind on the pooled connection. Every routine
// sets lock_timeout to the bound it was given, also for its own
// transaction only (ADR 0135).
func TestOnlyReleaseCommitsAsynchronously(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	id := open(t, b, time.Minute)
	tok := acquire(t, b, id, "dur")

	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	show := func(q pgx.Tx) string {
		t.Helper()
		var v, lt string
		if err := q.QueryRow(ctxT(t), "SELECT current_setting('synchronous_commit'), current_setting('lock_timeout')").Scan(&v, &lt); err != nil {
			t.Fatal(err)
		}
		if lt != "4321ms" {
			t.Errorf("lock_timeout in the routine's transaction = %q, want 4321ms", lt)
		}
		return v
	}
	var before, beforeLT string
	if err := conn.QueryRow(ctxT(t), "SELECT current_setting('synchronous_commit'), current_setting('lock_timeout')").Scan(&before, &beforeLT); err != nil {
		t.Fatal(err)
	}
	if before == "off" {
		t.Fatalf("synchronous_commit is off on the test server: this test needs it on")
	}
	// prefix is a valid fresh prefix, the only text placed into SQL here.
	calls := []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"open", "SELECT " + prefix + "_open_v3($1, $2, '', 4321)", []any{fmt.Sprintf("%032x", 7), int64(time.Minute / time.Microsecond)}, before},
		{"renew", "SELECT * FROM " + prefix + "_renew_v2($1, $2, 4321)", []any{string(id), int64(0)}, before},
		{"acquire", "SELECT * FROM " + prefix + "_acquire_v2($1, $2, 1000000, 4321)", []any{string(id), []string{"dur2"}}, before},
		{"release", "SELECT " + prefix + "_release_v2($1, $2, $3, 4321)", []any{string(id), []string{"dur"}, []int64{int64(tok)}}, "off"},
		{"close", "SELECT " + prefix + "_close_v2($1, 4321)", []any{fmt.Sprintf("%032x", 7)}, before},
	}
	for _, c := range calls {
		tx, err := conn.Begin(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctxT(t), c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := show(tx); got != c.want {
			t.Errorf("after %s, in its transaction: synchronous_commit = %q, want %q", c.name, got, c.want)
		}
		if err := tx.Commit(ctxT(t)); err != nil {
			t.Fatalf("%s: commit: %v", c.name, err)
		}
		var after, afterLT string
		if err := conn.QueryRow(ctxT(t), "SELECT current_setting('synchronous_commit'), current_setting('lock_timeout')").Scan(&after, &afterLT); err != nil {
			t.Fatal(err)
		}
		if after != before || afterLT != beforeLT {
			t.Errorf("after %s committed: synchronous_commit = %q, lock_timeout = %q; want %q, %q (the settings must not outlive the transaction)", c.name, after, afterLT, before, beforeLT)
		}
	}
	// The release above really happened: the name is free for another
	// session.
	other := open(t, b, time.Minute)
	if got := acquire(t, b, other, "dur"); got <= tok {
		t.Fatalf("token after the release = %d, want > %d", got, tok)
	}
}

// TestNoticeComesAfterReleaseIsVisible: however the release commits, the
// notice is sent only once the release is visible, so an acquire made on
// receipt of the notice (while the release call may still be returning)
// always wins. Thirty rounds, a fresh name each.
func TestNoticeComesAfterReleaseIsVisible(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	a := newBackend(t, pool, prefix)
	b, err := newBackendNoDrop(t, pool, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	ida, idb := open(t, a, time.Minute), open(t, b, time.Minute)
	for i := range 30 {
		name := fmt.Sprintf("vis-%d", i)
		tok := acquire(t, a, ida, name)
		errc := make(chan error, 1)
		go func() {
			errc <- a.Release(ctxT(t), driver.ReleaseRequest{ID: ida, Leases: []driver.Lease{{Name: name, Token: tok}}})
		}()
		next(t, ch, "notice for "+name, func(n driver.Notice) bool { return n.Name == name })
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: idb, Names: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Results[0].Token; got <= tok {
			t.Fatalf("%s: acquire on the notice got token %d, want > %d (the release was not visible when notified)", name, got, tok)
		}
		if err := <-errc; err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
}
