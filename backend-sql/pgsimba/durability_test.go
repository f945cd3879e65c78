package pgsimba_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

// TestRoutineCommitSettings: whatever the connection's synchronous_commit
// (the server's, database's or role's default, or a SET), open, renew,
// acquire and epoch commit with at least a local WAL flush (ADR 0160):
// from off they raise it to local for their own transaction, and they
// leave every stronger setting as it is. The release routine sets off for
// its own transaction only (ADR 0034); close keeps the connection's
// setting. Nothing outlives the routine's transaction on the pooled
// connection. Every routine sets lock_timeout to the bound it was given,
// also for its own transaction only (ADR 0135).
func TestRoutineCommitSettings(t *testing.T) {
	for _, conf := range []string{"off", "local", "on", "remote_apply"} {
		t.Run(conf, func(t *testing.T) { testRoutineCommitSettings(t, conf) })
	}
}

func testRoutineCommitSettings(t *testing.T, conf string) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	id := open(t, b, time.Minute)
	tok := acquire(t, b, id, "dur")

	pc, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The setting is the session's: the connection is not given back.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	// conf is one of the literals above.
	if _, err := conn.Exec(ctxT(t), "SET synchronous_commit = "+conf); err != nil {
		t.Fatal(err)
	}
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
	if before != conf {
		t.Fatalf("synchronous_commit = %q after SET %s", before, conf)
	}
	flushed := conf
	if conf == "off" {
		flushed = "local"
	}
	// Lose the namespace's epoch row, so that acquire fails with SX002
	// and epoch_v2 has a loss to note.
	if _, err := pool.Exec(ctxT(t), "DELETE FROM "+prefix+"_epoch"); err != nil {
		t.Fatal(err)
	}
	// prefix is a valid fresh prefix, the only text placed into SQL here.
	calls := []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"open", "SELECT " + prefix + "_open_v5($1, $2, '', 4321)", []any{fmt.Sprintf("%032x", 7), int64(time.Minute / time.Microsecond)}, flushed},
		{"renew", "SELECT * FROM " + prefix + "_renew_v3($1, $2, 4321)", []any{string(id), int64(0)}, flushed},
		{"epoch", "SELECT " + prefix + "_epoch_v3(1000000, 4321)", nil, flushed},
		{"release", "SELECT " + prefix + "_release_v4($1, $2, $3, 4321)", []any{string(id), []string{"dur"}, []int64{int64(tok)}}, "off"},
		{"close", "SELECT " + prefix + "_close_v4($1, 4321)", []any{fmt.Sprintf("%032x", 7)}, conf},
		// acquire: below, once epoch_v2's quarantine is lifted (now it
		// fails with SX002, which aborts its transaction).
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
			t.Errorf("synchronous_commit %s: after %s, in its transaction: synchronous_commit = %q, want %q", conf, c.name, got, c.want)
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
	// Lift the quarantine epoch_v2 started, then acquire a name.
	if _, err := pool.Exec(ctxT(t), "UPDATE "+prefix+"_epoch SET quarantine_until = clock_timestamp()"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := tx.QueryRow(ctxT(t), "SELECT ("+prefix+"_acquire_v5($1, $2, 1000000, 4321, 0))[1]", string(id), []string{"dur2"}).Scan(&got); err != nil || got <= 0 {
		t.Fatalf("acquire_v5: token %d, %v", got, err)
	}
	if v := show(tx); v != flushed {
		t.Errorf("synchronous_commit %s: after acquire, in its transaction: synchronous_commit = %q, want %q", conf, v, flushed)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
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
		if got := acquire(t, b, idb, name); got != 0 { // b waits: the release notifies
			t.Fatalf("%s: b took it from live a (token %d)", name, got)
		}
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

// TestCheckServer: on the real server, CheckServer warns about fsync
// exactly when it is off (ADR 0160); the test server has no standbys.
func TestCheckServer(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b := newBackend(t, pool, "")
	var fsync string
	if err := pool.QueryRow(ctxT(t), "SHOW fsync").Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	w, err := b.CheckServer(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if (fsync == "off") != (len(w) == 1) || len(w) > 1 {
		t.Fatalf("fsync %s: warnings %q", fsync, w)
	}
}
