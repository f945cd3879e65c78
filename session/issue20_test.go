package session_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The defects of issue 20 in the engine, each with a test that failed
// before its fix.

// Item 1: a Listener runs on the delivery loop; Close from it waited for
// the loop it was holding up, for ever. The loop's goroutine is marked as
// the loop now: Close returns ErrWouldBlockSelf at once, the session closed.
func TestCloseFromAListenerDoesNotWaitForItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		var s *session.Session
		var mu sync.Mutex
		var closeErr error
		closed := make(chan struct{})
		var once sync.Once
		l := func(e session.Event) {
			if e.Kind != session.SessionOpened {
				return
			}
			once.Do(func() {
				mu.Lock()
				ss := s
				mu.Unlock()
				err := ss.Close()
				mu.Lock()
				closeErr = err
				mu.Unlock()
				close(closed)
			})
		}
		mu.Lock() // the listener waits for s
		ss, err := session.New(b, session.WithListener(l), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		s = ss
		mu.Unlock()
		<-closed
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(closeErr, session.ErrWouldBlockSelf) || ss.State() != session.Closed {
			t.Fatalf("Close from a Listener = %v, state %v; want ErrWouldBlockSelf, CLOSED", closeErr, ss.State())
		}
		select {
		case <-ss.Done():
		default:
			t.Fatal("Done not closed after a Close from a Listener")
		}
	})
}

// shortGrants caps the remaining time of every grant at 300 ms while short
// is set: a backend clamping leases for a while.
type shortGrants struct {
	*memory.Backend
	short *atomic.Bool
}

func (s shortGrants) clamp(d time.Duration) time.Duration {
	if s.short.Load() {
		return min(d, 300*time.Millisecond)
	}
	return d
}

func (s shortGrants) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	r, err := s.Backend.Open(ctx, req)
	r.Remaining = s.clamp(r.Remaining)
	return r, err
}

func (s shortGrants) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := s.Backend.Renew(ctx, req)
	r.Remaining = s.clamp(r.Remaining)
	return r, err
}

// Item 2: after a shortened grant (300 ms, renewing every 82 ms) and that
// session's deadline passing, every later call was bounded by the dead
// session's shortened period: with full grants again and replies taking
// 200 ms, every Open was given up after 82 ms and the Session stayed
// OPENING for good. A new incarnation's calls are bounded by the
// configuration.
func TestOpenAfterAShortenedSessionDiedIsBoundedByTheConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		short := &atomic.Bool{}
		short.Store(true)
		s := openDecorated(t, shortGrants{b, short})
		if every := time.Duration(s.Snapshot().RenewEvery); every >= time.Second {
			t.Fatalf("renewing every %v under a 300 ms grant, want a shortened period", every)
		}
		b.FailCalls(errors.New("unreachable")) // the renewals fail: the 300 ms deadline passes
		advance(time.Second)
		if st := s.State(); st != session.Opening {
			t.Fatalf("state %v after the shortened session's deadline passed, want OPENING", st)
		}
		short.Store(false)
		b.SetReplyDelay(200 * time.Millisecond)
		b.FailCalls(nil)
		advance(10 * time.Second)
		if st := s.State(); st != session.Live {
			t.Fatalf("state %v 10 s after the backend came back with full grants and 200 ms replies, want LIVE", st)
		}
		if every, want := time.Duration(s.Snapshot().RenewEvery), s.Config().RenewInterval; every != want {
			t.Fatalf("renewing every %v with full grants, want the configured %v", every, want)
		}
	})
}

// The mutations of issue 20's "What the checks missed" that survived the
// tests and the simulation, each killed by the test below.

// Mutation open-deadline-from-receive-time-pure: the Open's local deadline
// is counted from the request's send, like a renewal's: a slow reply only
// shortens it.
func TestOpenReplyDelayOnlyShortensTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		b.SetReplyDelay(time.Second) // granted 15 s at the send, answered 1 s later
		s := openDecorated(t, b)
		// deadline = send + 14.8 s; now send + 1 s.
		if got, want := s.Remaining(), 13800*time.Millisecond; got != want {
			t.Fatalf("Remaining() right after Open = %v, want %v (counted from the send)", got, want)
		}
	})
}

// Mutation batch-runs-on-first-caller: an Acquire for several claims never
// runs on the goroutine of a caller that waits (DoWait), whose context may
// give it up: that would fail the other claims' attempts too.
func TestABatchNeverRunsOnACallersGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := openDecorated(t, &slowAcquire{Backend: b, delay: 2 * time.Second})
		eng := layer.MustOf(s)
		ra, rb := &recorder{}, &recorder{}
		ca, _ := eng.Claim("a", ra)
		cb, _ := eng.Claim("b", rb)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		eng.DoWait(ctx, func() { eng.WantAll([]layer.Claim{ca, cb}) }) // one Acquire for both
		advance(3 * time.Second)
		if len(rb.terms()) != 1 || len(rb.refuse) != 0 {
			t.Fatalf("b: %d terms, refusals %v after a caller's ctx ended during a batch with b in it; want b's attempt unharmed (won)", len(rb.terms()), rb.refuse)
		}
	})
}

// Mutation runner-kept-after-waiter-left: once a caller blocked in
// WaitRunning has left, the claim's next attempt goes to the backend, not
// to the departed caller (where it was swallowed, and with it every later
// Acquire of the session).
func TestAttemptAfterTheWaiterLeftIsSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		g := openOn(t, f.b.NewClient(), deadline.Config{})
		cg, _ := g.claim("jobs") // g holds it
		_, r := f.claim("jobs")  // f waits
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		layer.MustOf(f.s).WaitRunning(ctx, "jobs", make(chan struct{})) // leaves when ctx ends
		layer.MustOf(g.s).Do(func() { cg.Want(false); cg.Release(term.Stopped, nil) })
		synctest.Wait() // the release notice's attempt, no tick
		if len(r.terms()) != 1 {
			t.Fatalf("f won %d terms on the release notice after its waiter left, want 1", len(r.terms()))
		}
	})
}

// slowName delays the replies of Acquire calls that ask for name (the
// backend acts at once).
type slowName struct {
	*memory.Backend
	name  string
	delay time.Duration
}

func (s slowName) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := s.Backend.Acquire(ctx, req)
	if slices.Contains(req.Names, s.name) {
		<-time.After(s.delay)
	}
	return r, err
}

// Mutation acquire-reply-does-not-pump: a release notice that arrives
// while another claim's Acquire is in flight is answered as soon as that
// reply comes, not at the next candidate tick (2.5 s or more later).
func TestNoticeDuringAnotherClaimsAcquireIsAnsweredWithItsReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		g := openOn(t, b.NewClient(), deadline.Config{})
		cg, _ := g.claim("jobs") // g holds it
		s := openDecorated(t, slowName{Backend: b, name: "slow", delay: time.Second})
		eng := layer.MustOf(s)
		r := &recorder{}
		c, _ := eng.Claim("jobs", r)
		eng.Do(func() { c.Want(true) }) // refused at once: the candidate tick is armed
		synctest.Wait()
		slow, _ := eng.Claim("slow", &recorder{})
		eng.Do(func() { slow.Want(true) }) // in flight for 1 s
		layer.MustOf(g.s).Do(func() { cg.Want(false); cg.Release(term.Stopped, nil) })
		synctest.Wait() // the notice queued "jobs" behind the Acquire in flight
		if len(r.terms()) != 0 {
			t.Fatal("won while another Acquire was in flight: the test does not test the wait")
		}
		advance(1500 * time.Millisecond)
		if len(r.terms()) != 1 {
			t.Fatalf("%d terms 0.5 s after the other Acquire's reply; want the notice answered with it, not at the candidate tick", len(r.terms()))
		}
	})
}

// Item 2, the dead session's own Close: when a shortened session's deadline
// passes, the session is closed on the backend (it may hold leases others
// wait for). That Close was bounded by the dead session's shortened period
// too, and given up before a slow backend could act on it.
func TestCloseOfADeadShortenedSessionIsBoundedByTheConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		short := &atomic.Bool{}
		short.Store(true)
		s := openDecorated(t, shortGrants{b, short})
		old := s.ID()
		b.Pause() // nothing is answered: the 300 ms deadline passes, the Close of the old session waits
		advance(time.Second)
		if st := s.State(); st != session.Opening {
			t.Fatalf("state %v after the shortened session's deadline passed, want OPENING", st)
		}
		short.Store(false)
		b.Resume()
		advance(100 * time.Millisecond)
		if _, alive := b.Remaining(old); alive {
			t.Fatal("the dead session is still open on the backend: its Close was given up after the dead session's shortened period")
		}
	})
}
