package memory_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// These tests run in a synctest bubble: synctest.Wait returns once every
// goroutine of the bubble is blocked, so they know a call is parked in
// Pause without sleeping, and reply delays pass in fake time.

func TestPauseBlocksUntilResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.open()
		f.b.Pause()
		done := make(chan error, 1)
		go func() {
			_, err := f.b.Acquire(t.Context(), driver.AcquireRequest{ID: a, Names: []string{"x"}})
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Acquire returned %v while paused", err)
		default:
		}
		f.wantOwner("x", "", 0) // a paused call has not taken effect
		f.b.Resume()
		if err := <-done; err != nil {
			t.Fatalf("Acquire after Resume: %v", err)
		}
		f.wantOwner("x", a, 1)
	})
}

func TestPausedCallEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.open()
		f.b.Pause()
		defer f.b.Resume()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := f.b.Acquire(ctx, driver.AcquireRequest{ID: a, Names: []string{"x"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("returned after %v, want the ctx's 1s", waited)
		}
		f.wantOwner("x", "", 0)
	})
}

func TestReplyDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.open()
		f.b.SetReplyDelay(3 * time.Second)
		start := time.Now()
		if tok := f.acquire(a, "x"); tok != 1 {
			t.Errorf("token %d, want 1", tok)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("reply after %v, want 3s", waited)
		}
		// A caller that gives up first gets ctx's error, yet the call took
		// effect: the engine's "lost reply" case.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := f.b.Acquire(ctx, driver.AcquireRequest{ID: a, Names: []string{"y"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		f.wantOwner("y", a, 1)
	})
}

func TestSubscribeStopWaitsForDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.open()
		tok := f.acquire(a, "x")
		inFn, release := make(chan struct{}), make(chan struct{})
		calls := 0
		stop, err := f.b.Subscribe(func(driver.Notice) {
			calls++
			close(inFn)
			<-release // a slow subscriber, to catch stop not waiting
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tok}}})
		}()
		<-inFn
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stop returned while fn was running")
		default:
		}
		close(release)
		<-stopped
		b := f.open()
		tb := f.acquire(b, "y")
		_ = f.b.Release(t.Context(), driver.ReleaseRequest{ID: b, Leases: []driver.Lease{{Name: "y", Token: tb}}})
		if calls != 1 {
			t.Errorf("fn called %d times, want 1 (none after stop)", calls)
		}
		stop() // idempotent
	})
}

func TestDeterministic(t *testing.T) {
	// Two backends fed the same ids and the same calls on virtual clocks
	// answer identically: what the seeded simulation relies on.
	run := func() []any {
		n := 0
		f := newFixture(t, memory.WithIDSource(func() driver.ID { n++; return driver.ID(string(rune('a' + n))) }))
		var out []any
		stop, _ := f.b.Subscribe(func(n driver.Notice) { out = append(out, n) })
		defer stop()
		var ids []driver.ID
		for range 5 {
			ids = append(ids, f.open())
		}
		for i, id := range ids {
			r, err := f.b.Acquire(t.Context(), driver.AcquireRequest{ID: id, Names: []string{"p", "q", "r", "s"}[i%4:]})
			out = append(out, r, err)
		}
		f.clock.Advance(lease)
		out = append(out, f.open())
		for _, id := range ids {
			r, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: id})
			out = append(out, r, err == nil)
		}
		return out
	}
	a, b := run(), run()
	if len(a) != len(b) {
		t.Fatalf("runs differ in length: %d vs %d", len(a), len(b))
	}
	for i := range a {
		if sa, sb := fmtAny(a[i]), fmtAny(b[i]); sa != sb {
			t.Errorf("step %d: %s vs %s", i, sa, sb)
		}
	}
}

func TestSubscriberMayCallTheBackend(t *testing.T) {
	// fn releases a second lease from inside the first notice: the second
	// notice is queued and delivered after fn returns, in order, instead of
	// deadlocking or nesting.
	f := newFixture(t)
	a := f.open()
	tx, ty := f.acquire(a, "x"), f.acquire(a, "y")
	var got []string
	depth := 0
	stop, _ := f.b.Subscribe(func(n driver.Notice) {
		depth++
		defer func() { depth-- }()
		if depth > 1 {
			t.Errorf("fn nested (depth %d) for %q", depth, n.Name)
		}
		got = append(got, n.Name)
		if n.Name == "x" {
			_ = f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "y", Token: ty}}})
		}
	})
	defer stop()
	if err := f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tx}}}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Errorf("notices %q, want [x y]", got)
	}
}
