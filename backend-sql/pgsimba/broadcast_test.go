package pgsimba_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

func subscribe(t *testing.T, b *pgsimba.Backend) (<-chan driver.Notice, func()) {
	t.Helper()
	ch := make(chan driver.Notice, 64)
	stop, err := b.Subscribe(func(n driver.Notice) {
		select {
		case ch <- n:
		default:
			t.Errorf("notice %+v dropped: test channel full", n)
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(stop)
	return ch, stop
}

// listening returns a pool, a fresh namespace's prefix, a Backend on it
// and the Backend's notices, once its LISTEN is in effect.
func listening(t *testing.T) (*pgxpool.Pool, string, *pgsimba.Backend, <-chan driver.Notice) {
	t.Helper()
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, pool, prefix)
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	return pool, prefix, b, ch
}

// next waits for a notice that satisfies ok, skipping others.
func next(t *testing.T, ch <-chan driver.Notice, what string, ok func(driver.Notice) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-ch:
			if ok(n) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

func TestBroadcastRelease(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	a := newBackend(t, pool, prefix)
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })

	ida := open(t, a, 10*time.Second)
	tok := acquireWaited(t, a, ida, "boss")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: ida, Leases: []driver.Lease{{Name: "boss", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "notice for the released name", func(n driver.Notice) bool { return n.Name == "boss" })

	// Close announces every lease it frees.
	acquire(t, a, ida, "c1")
	acquire(t, a, ida, "c2")
	waitFor(t, a, "c1", "c2")
	if err := a.Close(ctxT(t), ida); err != nil {
		t.Fatal(err)
	}
	// In the order Close freed them: by bucket, then name (ADR 0250).
	seen := map[string]bool{}
	next(t, ch, "notices c1 and c2 from Close", func(n driver.Notice) bool {
		seen[n.Name] = true
		return seen["c1"] && seen["c2"]
	})

	// A release that does not match announces nothing: only the next
	// real one arrives.
	idc := open(t, a, 10*time.Second)
	// Nor does a release of a name nobody was refused (ADR 0162).
	tok = acquire(t, a, idc, "nowait")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: idc, Leases: []driver.Lease{{Name: "nowait", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	tok = acquireWaited(t, a, idc, "m")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: idc, Leases: []driver.Lease{{Name: "m", Token: tok + 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: idc, Leases: []driver.Lease{{Name: "m", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ch:
		if n.Name != "m" {
			t.Fatalf("notice %+v, want m (a no-op release, or one of a name nobody was refused, must not notify)", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notice for m")
	}
}

func TestBroadcastSurvivesConnectionLoss(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	a := newBackend(t, pool, prefix)
	ch, _ := subscribe(t, a)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })

	var killed int
	err := pool.QueryRow(ctxT(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = $1 AND pid <> pg_backend_pid()`, fmt.Sprintf(`LISTEN "%s_released"`, prefix)).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the listening connection: killed %d, %v; want 1", killed, err)
	}
	// After reconnecting, the backend says notices may have been lost.
	next(t, ch, "empty notice after the reconnect", func(n driver.Notice) bool { return n.Name == "" })
	id := open(t, a, 10*time.Second)
	tok := acquireWaited(t, a, id, "after")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "after", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "notice on the new connection", func(n driver.Notice) bool { return n.Name == "after" })
}

func TestSubscribeStop(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	a := newBackend(t, pool, prefix)
	var stopped, late atomic.Bool
	stop, err := a.Subscribe(func(n driver.Notice) {
		if stopped.Load() {
			late.Store(true)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stopped.Store(true)
	stop() // a second stop is harmless

	// A witness subscribed on another backend value sees the release, so by
	// then the stopped one would have seen it too.
	w, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	ch, _ := subscribe(t, w)
	next(t, ch, "witness LISTEN up", func(n driver.Notice) bool { return n.Name == "" })
	id := open(t, a, 10*time.Second)
	tok := acquireWaited(t, a, id, "q")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "q", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "witness notice", func(n driver.Notice) bool { return n.Name == "q" })
	if late.Load() {
		t.Fatal("fn called after stop returned")
	}
	_ = a.Shutdown(context.Background())
	if _, err := a.Subscribe(func(driver.Notice) {}); err == nil {
		t.Fatal("Subscribe after Shutdown succeeded")
	}
}

// A subscriber's function may stop another subscription (say, by closing
// another session on the same backend) without deadlocking delivery.
func TestSubscriberMayStopAnother(t *testing.T) {
	a := newBackend(t, newPool(t, pgURL(t), nil), "")
	stop2, err := a.Subscribe(func(driver.Notice) {})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	stop1, err := a.Subscribe(func(driver.Notice) {
		once.Do(func() {
			stop2()
			close(done)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop1()
	// Subscribe returned with LISTEN in effect, so a release reaches fn.
	id := open(t, a, 10*time.Second)
	tok := acquireWaited(t, a, id, "q")
	if err := a.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "q", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping another subscription from a notice did not return")
	}
}

// A refused acquire is told of the name's next release even when the
// lease changed hands without a release in between (ADR 0162): W is
// refused x while A holds it; A's session ends without a release (its row
// gone, as when it expires and is swept); C takes x over; C's release
// must notify x, since W still waits. A takeover that cleared the mark
// would leave W to its poll.
func TestNoticeAfterTakeoverReachesEarlierWaiter(t *testing.T) {
	pool, prefix, b, ch := listening(t)
	a := open(t, b, 10*time.Second)
	acquire(t, b, a, "x")
	waitFor(t, b, "x")
	// prefix is a fresh valid prefix, the only text placed into SQL here.
	if _, err := pool.Exec(ctxT(t), "DELETE FROM "+prefix+"_sessions WHERE id = $1", string(a)); err != nil {
		t.Fatal(err)
	}
	c := open(t, b, 10*time.Second)
	tc := acquire(t, b, c, "x")
	if tc == 0 {
		t.Fatal("C did not take x over from A's ended session")
	}
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: c, Leases: []driver.Lease{{Name: "x", Token: tc}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "notice for x after C's release (W was refused x before C took it)", func(n driver.Notice) bool { return n.Name == "x" })
}

// A grant of a name a release freed clears the mark, and the next refusal
// sets it again: W is refused, A releases (notice), A takes x again, W is
// refused again, A closes (notice again); a release after that, with
// nobody refused since, notifies nothing.
func TestNoticeMarkIsSetAgainByTheNextRefusal(t *testing.T) {
	_, _, b, ch := listening(t)
	a := open(t, b, 10*time.Second)
	w := open(t, b, 10*time.Second)
	refused := func() {
		t.Helper()
		if tok := acquire(t, b, w, "x"); tok != 0 {
			t.Fatalf("W took x from live A (token %d)", tok)
		}
	}
	release := func(id driver.ID, name string, tok uint64) {
		t.Helper()
		if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
			t.Fatal(err)
		}
	}
	tok := acquire(t, b, a, "x")
	refused()
	release(a, "x", tok)
	next(t, ch, "notice for x after the first release", func(n driver.Notice) bool { return n.Name == "x" })
	acquire(t, b, a, "x")
	refused()
	if err := b.Close(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "notice for x after the close that followed the second refusal", func(n driver.Notice) bool { return n.Name == "x" })
	c := open(t, b, 10*time.Second)
	release(c, "x", acquire(t, b, c, "x")) // nobody refused since: no notice
	release(c, "end", acquireWaited(t, b, c, "end"))
	next(t, ch, "notice for end", func(n driver.Notice) bool {
		if n.Name == "x" {
			t.Error("a release of x nobody was refused since the last notice notified it")
		}
		return n.Name == "end"
	})
}
