package group_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// Partitions won with a lock-delay: a rebalance hands them over with a
// release, at once; a crashed member's partitions are taken only once its
// session has expired and their delay has passed (ADR 0240).
func TestGroupLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, delay = 4, 20 * time.Second
		b, _ := memory.New(memory.WithMaxLockDelay(delay))
		r := newRecord()
		aClient := b.NewClient()
		a := join(t, openSession(t, aClient), "a", n, r, group.WithLockDelay(delay))
		advance(settle)
		owned(t, n, a)
		c := join(t, openSession(t, b), "c", n, r, group.WithLockDelay(delay))
		advance(settle) // two partitions move by release: no delay
		owned(t, n, a, c)
		before := terms(c)

		aClient.FailCalls(errors.New("crashed")) // its session expires on the backend
		_ = a.Session().Close()
		// a renewed at most a renewal interval (5s) ago: its session ends
		// no sooner than 10s from now, its partitions' delays no sooner
		// than 30s from now.
		advance(30*time.Second - time.Millisecond)
		if got := len(c.Terms()); got != len(before) {
			t.Fatalf("c owns %d partitions 30s after a crashed, want %d: a's partitions were taken within their lock-delay", got, len(before))
		}
		advance(deadline.DefaultLeaseDuration + delay + settle)
		owned(t, n, c)
		r.check(t)
	})
}

// A lock-delay the backend refuses stops the partitions and is reported
// once to OnError, not retried at every poll; a negative one is refused by
// Join.
func TestGroupLockDelayRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New() // WithMaxLockDelay 0
		var mu sync.Mutex
		var errs []error
		r := newRecord()
		g := join(t, openSession(t, b), "a", 8, r, group.WithLockDelay(time.Second), group.OnError(func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}))
		advance(settle)
		calls := b.Stats().Acquire
		advance(time.Minute)
		if n := b.Stats().Acquire - calls; n != 0 {
			t.Errorf("%d Acquire calls in the minute after the refusal, want none", n)
		}
		if got := len(g.Terms()); got != 0 {
			t.Errorf("%d partitions owned with a refused lock-delay", got)
		}
		mu.Lock()
		if len(errs) != 1 || !errors.Is(errs[0], session.ErrLockDelay) {
			t.Errorf("OnError got %v, want one error wrapping ErrLockDelay", errs)
		}
		mu.Unlock()
		if _, err := group.Join(openSession(t, b), "orders", 8, group.WithLockDelay(-time.Second)); !errors.Is(err, group.ErrInvalidGroup) {
			t.Errorf("WithLockDelay(-1s): %v, want ErrInvalidGroup", err)
		}
	})
}

// renewalsCut passes every call to its memory client but the renewals,
// which fail while cut is set: a member whose local deadline passes while
// the backend still has its session.
type renewalsCut struct {
	*memory.Backend
	mu  sync.Mutex
	cut bool
}

func (r *renewalsCut) set(cut bool) { r.mu.Lock(); r.cut = cut; r.mu.Unlock() }

func (r *renewalsCut) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r.mu.Lock()
	cut := r.cut
	r.mu.Unlock()
	if cut {
		return driver.RenewReply{}, errors.New("renewals cut")
	}
	return r.Backend.Renew(ctx, req)
}

// A member whose session's local deadline passes loses its partitions
// without a release: nobody, not even the member's next backend session,
// takes them before the old session has expired on the backend and their
// lock-delay has passed (the engine leaves that session to expire rather
// than close it, ADR 0275); then the member rejoins and the partitions are
// shared again.
func TestGroupLockDelayAfterTheDeadlinePassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, delay = 4, 20 * time.Second
		b, _ := memory.New(memory.WithMaxLockDelay(delay))
		r := newRecord()
		ac := &renewalsCut{Backend: b.NewClient()}
		a := join(t, openSession(t, ac), "a", n, r, group.WithLockDelay(delay))
		advance(settle)
		c := join(t, openSession(t, b), "c", n, r, group.WithLockDelay(delay))
		advance(settle)
		owned(t, n, a, c)
		mine := terms(a)
		ac.set(true)
		// a's local deadline passes within what its backend session has
		// left; that session ends a little later, and its partitions'
		// delays 20s after that.
		left, live := b.Remaining(driver.ID(a.Session().ID()))
		if !live {
			t.Fatal("a's backend session is not live")
		}
		regranted := func(when string) {
			t.Helper()
			for _, g := range []*group.Group{a, c} {
				for p, tm := range g.Terms() {
					if old, was := mine[p]; was && tm.Token() != old {
						t.Fatalf("%s: partition %d (a's until its deadline passed, token %d) granted again to %s (token %d), within its lock-delay of %v after a's backend session ended", when, p, old, g.MemberID(), tm.Token(), delay)
					}
				}
			}
		}
		advance(left)
		regranted("when a's backend session ended")
		ac.set(false)
		advance(delay - time.Second)
		regranted("a second before the delay's end")
		advance(delay + settle)
		owned(t, n, a, c)
		r.check(t)
	})
}
