package session_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// stuckAcquire is a Backend decorator whose Acquire hangs until its
// context ends, recording how long that took.
type stuckAcquire struct {
	*memory.Backend
	mu     sync.Mutex
	waited []time.Duration
}

func (b *stuckAcquire) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	start := time.Now()
	<-ctx.Done()
	b.mu.Lock()
	b.waited = append(b.waited, time.Since(start))
	b.mu.Unlock()
	return driver.AcquireReply{}, ctx.Err()
}

// A backend call times out one renewal period after it was sent, also when
// the session's watchdog (one timer for the timeouts of every call in
// flight, ADR 0161) was armed for an earlier call that has returned since:
// here the Open's, due at 5s, while the Acquire sent at 1s is due at 6s.
// The watchdog firing at 5s must arm itself again for the Acquire.
func TestCallTimesOutOneRenewalPeriodAfterItWasSentWhateverTheWatchdogWasArmedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &stuckAcquire{Backend: mb}
		s := openDecorated(t, b) // Open at 0s: the watchdog is armed for 5s
		advance(time.Second)
		eng := layer.MustOf(s)
		r := &recorder{}
		c, err := eng.Claim("jobs", r)
		if err != nil {
			t.Fatal(err)
		}
		eng.Do(func() { c.Want(true) }) // Acquire sent at 1s, due at 6s
		advance(5*time.Second + time.Millisecond)
		b.mu.Lock()
		waited := append([]time.Duration(nil), b.waited...)
		b.mu.Unlock()
		if len(waited) == 0 || waited[0] != 5*time.Second {
			t.Fatalf("the Acquire sent at 1s gave up after %v, want one renewal period (5s)", waited)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.refuse) == 0 || !errors.Is(r.refuse[0], context.DeadlineExceeded) {
			t.Fatalf("refusals %v, want the timed-out attempt's DeadlineExceeded", r.refuse)
		}
	})
}

var _ session.Backend = (*stuckAcquire)(nil)

// A call due before the time the watchdog is armed for re-arms it: here
// the renewal period shrinks with the Open's shortened grant (a
// ZooKeeper-like backend, 5/12 of the lease: renewals every ≈2.046s), after
// the Open armed the watchdog for its own due time, one configured renewal
// period (5s) after it was sent. The Acquire sent right after the Open is
// due one shortened period later and must give up then, not when the
// watchdog was armed for (ADR 0161: "A call due earlier than the watchdog
// re-arms it").
func TestCallDueBeforeTheWatchdogReArmsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New(memory.WithGrantFraction(5, 12))
		b := &stuckAcquire{Backend: mb}
		s := openDecorated(t, b) // Open at 0s: the watchdog is armed for 5s
		every := time.Duration(s.Snapshot().RenewEvery)
		if every >= 5*time.Second {
			t.Fatalf("RenewEvery = %v, want the shortened period", every)
		}
		eng := layer.MustOf(s)
		r := &recorder{}
		c, err := eng.Claim("jobs", r)
		if err != nil {
			t.Fatal(err)
		}
		eng.Do(func() { c.Want(true) }) // Acquire sent at 0s, due at every
		advance(every + time.Millisecond)
		b.mu.Lock()
		waited := append([]time.Duration(nil), b.waited...)
		b.mu.Unlock()
		if len(waited) == 0 || waited[0] != every {
			t.Fatalf("the Acquire gave up after %v, want one (shortened) renewal period, %v", waited, every)
		}
	})
}
