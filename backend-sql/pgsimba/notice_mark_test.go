package pgsimba_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/core"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

// blockedBy waits until some backend's lock wait is blocked by pid: the
// call started in another goroutine waits for the row pid's transaction
// holds.
func blockedBy(t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-tick.C:
		case <-limit:
			t.Fatalf("no backend blocked by %d within 10s", pid)
		}
	}
}

// openAcquire runs acquire_v5 for id and name in a transaction left open,
// so that it holds the name's row; it returns the transaction, its
// server process and the token it answered.
func openAcquire(t *testing.T, pool *pgxpool.Pool, prefix string, id driver.ID, name string) (pgx.Tx, int32, int64) {
	t.Helper()
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var pid int32
	if err := tx.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var got []int64
	// prefix is a fresh valid prefix, the only text placed into SQL here.
	if err := tx.QueryRow(ctxT(t), "SELECT "+prefix+"_acquire_v5($1, $2, 1000000, 5000, 0)", string(id), []string{name}).Scan(&got); err != nil {
		t.Fatalf("acquire_v5 of %s in an open transaction: %v", name, err)
	}
	return tx, pid, got[0]
}

// A refusal whose transaction still holds the name's row while the
// holder's release or close waits for that row: the release reads the
// mark after the refusal committed, and notifies (ADR 0162's argument, the
// interleaving of row locks it rests on). A release that read the mark
// before taking the row would miss it.
func TestNoticeWhenRefusalCommitsWhileReleaseWaits(t *testing.T) {
	for _, mode := range []string{"release", "close"} {
		t.Run(mode, func(t *testing.T) {
			pool, prefix, b, ch := listening(t)
			a := open(t, b, 10*time.Second)
			w := open(t, b, 10*time.Second)
			tx := acquire(t, b, a, "x")
			acquire(t, b, a, "y") // nobody waits for y
			txW, pid, got := openAcquire(t, pool, prefix, w, "x")
			if got != 0 {
				t.Fatalf("W's acquire: token %d; want a refusal", got)
			}
			done := make(chan error, 1)
			go func() {
				if mode == "close" {
					done <- b.Close(ctxT(t), a)
				} else {
					done <- b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tx}}})
				}
			}()
			blockedBy(t, pool, pid)
			if err := txW.Commit(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			next(t, ch, "notice for x (W's refusal committed while the "+mode+" waited for x's row)", func(n driver.Notice) bool {
				if n.Name == "y" {
					t.Error("notice for y, which nobody was refused")
				}
				return n.Name == "x"
			})
		})
	}
}

// W's acquire comes while G's grant of the free name x is still open: W
// waits for G's row, is then refused and marks, and G's release notifies.
func TestNoticeWhenRefusalWaitsForAGrant(t *testing.T) {
	pool, prefix, b, ch := listening(t)
	w := open(t, b, 10*time.Second)
	g := open(t, b, 10*time.Second)
	txG, pid, tok := openAcquire(t, pool, prefix, g, "x")
	if tok == 0 {
		t.Fatal("G's acquire of the free x was refused")
	}
	refused := make(chan error, 1)
	go func() {
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: w, Names: []string{"x"}})
		if err == nil && rep.Results[0].Token != 0 {
			err = errors.New("W took x from G")
		}
		refused <- err
	}()
	blockedBy(t, pool, pid)
	if err := txG.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: g, Leases: []driver.Lease{{Name: "x", Token: uint64(tok)}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "notice for x after G's release", func(n driver.Notice) bool { return n.Name == "x" })
}

// A routine changed by hand that answers tokens this code cannot read
// grants nothing: each reply is an error naming the rule, wrapping
// ErrBadReply.
func TestAcquireRefusesMalformedTokens(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	id := open(t, b, 10*time.Second)
	for _, c := range []struct{ reply, want string }{
		{"'{}'", "0 tokens"},
		{"'{1,2}'", "2 tokens"},
		{"'{-5}'", "token -5"},
		{"ARRAY[NULL::bigint]", "NULL"},
		{"NULL", "0 tokens"},
		{"'{{1}}'", "dimensions"},
		{"'[0:0]={7}'", "dimensions"},
	} {
		// prefix is a fresh valid prefix; the replies are the test's own.
		if _, err := pool.Exec(ctxT(t), "CREATE OR REPLACE FUNCTION "+prefix+"_acquire_v5(p_id text, p_names text[], p_quarantine_us bigint, p_wait_ms bigint, p_delay_us bigint) RETURNS bigint[] LANGUAGE sql AS $$ SELECT "+c.reply+"::bigint[] $$"); err != nil {
			t.Fatal(err)
		}
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
		if !errors.Is(err, core.ErrBadReply) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("reply %s: %+v, %v; want an error wrapping ErrBadReply that says %q", c.reply, rep, err, c.want)
		}
	}
}

// The older routines on a namespace at version 7: TestOlderGrantsRefusedOnVersion7
// (rows_test.go); version 7 refuses their grants (ADR 0250).
