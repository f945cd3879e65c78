package term

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// clockLife is a fakeLife whose clock runs timers (a term.Timer on virtual
// time): advance moves the clock and fires what is due, in order.
type clockLife struct {
	fakeLife
	tmu    sync.Mutex
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Duration
	f       func()
	stopped bool
}

func (c *clockLife) AfterFunc(d time.Duration, f func()) func() bool {
	c.fakeLife.mu.Lock()
	now := c.fakeLife.now
	c.fakeLife.mu.Unlock()
	ft := &fakeTimer{at: now + d, f: f}
	c.tmu.Lock()
	c.timers = append(c.timers, ft)
	c.tmu.Unlock()
	return func() bool {
		c.tmu.Lock()
		defer c.tmu.Unlock()
		was := !ft.stopped
		ft.stopped = true
		return was
	}
}

// advance sets the clock to now (keeping the deadline end) and fires every
// timer due by then.
func (c *clockLife) advance(now time.Duration) {
	for fired := 0; ; fired++ {
		if fired > 1000 {
			panic("clockLife: more than 1000 timers fired in one advance (a timer re-arming itself at once)")
		}
		c.tmu.Lock()
		var due *fakeTimer
		for _, ft := range c.timers {
			if !ft.stopped && ft.at <= now && (due == nil || ft.at < due.at) {
				due = ft
			}
		}
		if due != nil {
			due.stopped = true
		}
		c.tmu.Unlock()
		if due == nil {
			c.fakeLife.mu.Lock()
			c.fakeLife.now = now
			c.fakeLife.mu.Unlock()
			return
		}
		c.fakeLife.mu.Lock()
		c.fakeLife.now = due.at
		c.fakeLife.mu.Unlock()
		due.f()
	}
}

func (c *clockLife) pending() int {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	n := 0
	for _, ft := range c.timers {
		if !ft.stopped {
			n++
		}
	}
	return n
}

func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

func TestContextBeforeEndsAtDeadlineMinusMargin(t *testing.T) {
	life := &clockLife{}
	life.set(0, 10*time.Second)
	tm, _ := New(context.Background(), "jobs", 1, life)
	ctx, cancel := tm.ContextBefore(2 * time.Second)
	defer cancel()
	life.advance(8*time.Second - time.Nanosecond)
	if done(ctx) {
		t.Fatal("ended before deadline - margin")
	}
	life.advance(8 * time.Second)
	if !done(ctx) || !errors.Is(context.Cause(ctx), ErrDeadlineNear) {
		t.Fatalf("at deadline - margin: done %v, cause %v; want ended with ErrDeadlineNear", done(ctx), context.Cause(ctx))
	}
	if !tm.Valid() {
		t.Fatal("the term itself is still valid for the margin")
	}
}

func TestContextBeforeFollowsRenewals(t *testing.T) {
	life := &clockLife{}
	life.set(0, 10*time.Second)
	tm, _ := New(context.Background(), "jobs", 1, life)
	ctx, cancel := tm.ContextBefore(2 * time.Second)
	defer cancel()
	// Renewed at 5s: the deadline moves to 15s before the first check.
	life.advance(5 * time.Second)
	life.set(5*time.Second, 15*time.Second)
	life.advance(12 * time.Second)
	if done(ctx) {
		t.Fatal("ended at the old deadline - margin after a renewal moved the deadline")
	}
	if life.pending() != 1 {
		t.Fatalf("%d timers pending, want 1 (re-armed once)", life.pending())
	}
	life.advance(13 * time.Second)
	if !done(ctx) {
		t.Fatal("did not end at the new deadline - margin")
	}
}

func TestContextBeforeEndsWithTheTermAndNeverAfterTheDeadline(t *testing.T) {
	life := &clockLife{}
	life.set(0, 10*time.Second)
	tm, revoke := New(context.Background(), "jobs", 1, life)
	ctx, cancel := tm.ContextBefore(-time.Second) // negative: zero
	defer cancel()
	life.advance(10 * time.Second)
	if !done(ctx) {
		t.Fatal("a negative margin: not ended at the deadline itself")
	}
	ctx2, cancel2 := tm.ContextBefore(time.Second) // asked after the deadline passed
	defer cancel2()
	if !done(ctx2) {
		t.Fatal("asked after the deadline: not ended at once")
	}
	life2 := &clockLife{}
	life2.set(10*time.Second, 20*time.Second)
	tm2, revoke2 := New(context.Background(), "jobs", 2, life2)
	ctx3, cancel3 := tm2.ContextBefore(time.Second)
	defer cancel3()
	revoke2(Stopped)
	if !done(ctx3) || !errors.Is(context.Cause(ctx3), Stopped) {
		t.Fatalf("term revoked: done %v, cause %v; want its reason", done(ctx3), context.Cause(ctx3))
	}
	_ = revoke
}

func TestContextBeforeCancel(t *testing.T) {
	life := &clockLife{}
	life.set(0, 10*time.Second)
	tm, _ := New(context.Background(), "jobs", 1, life)
	ctx, cancel := tm.ContextBefore(time.Second)
	cancel()
	if !done(ctx) || !errors.Is(ctx.Err(), context.Canceled) || life.pending() != 0 {
		t.Fatalf("after cancel: done %v, err %v, %d timers pending", done(ctx), ctx.Err(), life.pending())
	}
}

// loopLife is a clockLife whose timers, like a single-threaded simulated
// clock's, may only be armed or stopped on the loop: each stop records
// whether it came from there.
type loopLife struct {
	clockLife
	onLoop  bool // set while the loop runs (the test's goroutine)
	mu      sync.Mutex
	offLoop int
}

func (l *loopLife) AfterFunc(d time.Duration, f func()) func() bool {
	stop := l.clockLife.AfterFunc(d, f)
	return func() bool {
		l.mu.Lock()
		if !l.onLoop {
			l.offLoop++
		}
		l.mu.Unlock()
		return stop()
	}
}

// The term's end stops its ContextBefore timers on the goroutine that
// ends it (the engine's, holding its lock), not on a goroutine the
// context package starts later: a simulated clock is single-threaded. And
// contexts ended by cancel hold nothing of the term (review of issue 25).
func TestContextBeforeTimersStoppedByTheTermsEnd(t *testing.T) {
	synctest.Test(t, contextBeforeTimersStoppedByTheTermsEnd)
}

func contextBeforeTimersStoppedByTheTermsEnd(t *testing.T) {
	life := &loopLife{}
	life.set(0, 10*time.Second)
	tm, revoke := New(context.Background(), "jobs", 1, life)
	life.mu.Lock()
	life.onLoop = true
	life.mu.Unlock()
	for range 1000 {
		_, cancel := tm.ContextBefore(time.Second)
		cancel()
	}
	var ctxs []context.Context
	for range 3 {
		ctx, cancel := tm.ContextBefore(time.Second)
		defer cancel()
		ctxs = append(ctxs, ctx)
	}
	tm.mu.Lock()
	n := len(tm.befores)
	tm.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d ContextBefore contexts remembered by the term, want the 3 still waiting", n)
	}
	revoke(Stopped)
	life.mu.Lock()
	life.onLoop = false
	life.mu.Unlock()
	for _, ctx := range ctxs {
		<-ctx.Done()
	}
	synctest.Wait() // the goroutines the context package started have run
	life.mu.Lock()
	defer life.mu.Unlock()
	if life.offLoop != 0 {
		t.Fatalf("%d timers stopped off the loop, after the term's end returned", life.offLoop)
	}
	life.tmu.Lock()
	defer life.tmu.Unlock()
	for _, ft := range life.timers {
		if !ft.stopped {
			t.Fatal("a ContextBefore timer still pending after the term ended")
		}
	}
}
