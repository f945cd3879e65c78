package election_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// inline is a user executor that runs each callback on the goroutine that
// hands it over, as a pool running work on the caller when it is full does:
// not election.Direct, yet the callback runs on the delivery loop.
var inline = election.ExecutorFunc(func(f func()) error { f(); return nil })

// probeWaits calls B's blocking methods from a callback that may be on the
// delivery loop. Each wait is bounded, so that a call that would wait for
// its own caller fails the test instead of hanging it; Close (which takes
// no context) is tried only once the bounded calls said they do not wait.
func probeWaits(eb *election.Election) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := []error{eb.StepDown(ctx, time.Hour), eb.Stop(ctx)}
	for _, err := range errs {
		if !errors.Is(err, election.ErrWouldBlockSelf) {
			return errs
		}
	}
	return append(errs, eb.Close())
}

// Issue 20, item 1: a callback run inline by an executor that is not
// Direct, or a session Listener, calling Stop, StepDown or Close of
// another election waited on the delivery loop it was blocking itself.
// Whether a call is on the loop is known from where it runs now: each call
// returns ErrWouldBlockSelf at once, the handover goes on by itself once
// the callback returns.
func TestBlockingCallsFromTheDeliveryLoopDoNotWait(t *testing.T) {
	for _, from := range []string{"inline executor", "listener"} {
		t.Run(from, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var eb *election.Election
				var got []error
				probed := make(chan struct{})
				var once sync.Once
				probe := func() {
					once.Do(func() {
						mu.Lock()
						b := eb
						mu.Unlock()
						errs := probeWaits(b)
						mu.Lock()
						got = errs
						mu.Unlock()
						close(probed)
					})
				}
				var opts []session.Option
				if from == "listener" {
					opts = append(opts, session.WithListener(func(e session.Event) {
						if e.Kind == session.TermElected && e.Name == "a" {
							probe()
						}
					}))
				}
				s, err := session.Open(context.Background(), newBackend(t), append(opts, session.WithLogger(nil))...)
				if err != nil {
					t.Fatal(err)
				}
				var revokedB atomic.Int32
				b := start(t, s, "b", election.WithListener(election.Funcs{
					Revoked: func(*term.Term, term.RevokeReason) { revokedB.Add(1) },
				}))
				mu.Lock()
				eb = b
				mu.Unlock()
				aOpts := []election.Option{}
				if from == "inline executor" {
					aOpts = append(aOpts, election.WithExecutor(inline), election.WithListener(election.Funcs{
						Elected: func(*term.Term) { probe() },
					}))
				}
				start(t, s, "a", aOpts...)
				<-probed
				mu.Lock()
				errs := got
				mu.Unlock()
				if len(errs) != 3 {
					t.Fatalf("StepDown, Stop from the delivery loop = %v; want ErrWouldBlockSelf at once (Close not tried)", errs)
				}
				for i, err := range errs {
					if !errors.Is(err, election.ErrWouldBlockSelf) {
						t.Fatalf("call %d of [StepDown Stop Close] from the delivery loop = %v, want ErrWouldBlockSelf", i, err)
					}
				}
				synctest.Wait()
				if n := revokedB.Load(); n != 1 || b.Status() != election.Stopped {
					t.Fatalf("after the callback returned: B's OnRevoked %d times, status %v; want 1, STOPPED", n, b.Status())
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// lateReplies holds b's Release and c's Acquire back, each for a while,
// whatever their context says (the backend acted, its reply is slow); c's
// Acquire is answered with a quarantine.
type lateReplies struct {
	*memory.Backend
}

func (l lateReplies) Release(ctx context.Context, req driver.ReleaseRequest) error {
	<-time.After(3 * time.Second)
	return l.Backend.Release(context.WithoutCancel(ctx), req)
}

func (l lateReplies) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if len(req.Names) != 1 || req.Names[0] != "c" {
		return l.Backend.Acquire(ctx, req)
	}
	<-time.After(2 * time.Second)
	return driver.AcquireReply{Results: []driver.AcquireResult{{Name: "c"}}, Quarantine: 10 * time.Second}, nil
}

// Issue 20, item 4: Session.Close waited only for the effects queued
// before it. Here b.Stop delivers on a user goroutine held up by a slow
// listener; Close is called; b's release (in flight) and an Acquire reply
// announcing a quarantine land meanwhile, their effects queued behind the
// held loop; the listener is slow again on the quarantine's event. Close
// returned with b's OnRevoked not delivered; it must return only once
// every callback of every term has been.
func TestCloseReturnsAfterEveryCallbackOfEveryTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := newBackend(t)
		gate := make(chan struct{})
		slow := func(e session.Event) {
			switch {
			case e.Kind == session.TermRevoked && e.Name == "b":
				<-gate // the delivering goroutine (b.Stop's caller) is held up here
			case e.Kind == session.BackendQuarantined:
				<-time.After(10 * time.Second)
			}
		}
		s, err := session.Open(context.Background(), lateReplies{mb}, session.WithListener(slow), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		var revokedB atomic.Int32
		eb := start(t, s, "b", election.WithListener(election.Funcs{
			Revoked: func(*term.Term, term.RevokeReason) { revokedB.Add(1) },
		}))
		start(t, s, "c") // its Acquire is in flight for 2 s, b's release will be for 3 s
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = eb.Stop(ctx) // releases on a goroutine of its own, delivers here
		}()
		synctest.Wait()
		var atClose atomic.Int32
		closed := make(chan struct{})
		go func() {
			_ = s.Close()
			atClose.Store(revokedB.Load())
			close(closed)
		}()
		advance(4 * time.Second) // both replies land behind the held loop
		close(gate)
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatal("Close did not return")
		}
		advance(time.Minute) // what Close left running finishes, so that the test can end
		if n := atClose.Load(); n != 1 {
			t.Fatalf("Close returned with b's OnRevoked delivered %d times, want 1", n)
		}
	})
}

// lostRelease loses every Release while lose is set (the backend keeps the
// lease).
type lostRelease struct {
	*memory.Backend
	lose *atomic.Bool
}

func (l lostRelease) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if l.lose.Load() {
		return errors.New("connection reset")
	}
	return l.Backend.Release(ctx, req)
}

// Issue 20, item 3, for elections: the first attempt after a lost release
// is answered "already yours" under the released token; OnAttempt was
// skipped. It hears of the attempt at once now.
func TestOnAttemptHearsOfAStaleAlreadyYoursGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		lose := &atomic.Bool{}
		s := open(t, lostRelease{b, lose})
		e := start(t, s, "jobs")
		lose.Store(true)
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		lose.Store(false)
		var mu sync.Mutex
		var attempts []error
		start(t, s, "jobs", election.OnAttempt(func(err error) {
			mu.Lock()
			attempts = append(attempts, err)
			mu.Unlock()
		}))
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 1 || attempts[0] != nil {
			t.Fatalf("OnAttempt after a stale grant: %v, want one call (nil: the lease is held) at once", attempts)
		}
	})
}

// Issue 20, item 9: RunWhileLeader(nil) was accepted and the first term
// won crashed the process with a nil dereference. Start refuses it, and
// the options like it, naming the rule.
func TestStartRefusesNilCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, newBackend(t))
		for _, tc := range []struct {
			name string
			opt  election.Option
		}{
			{"RunWhileLeader(nil)", election.RunWhileLeader(nil)},
			{"Every with a nil job", election.Every(time.Second, nil, nil)},
			{"Every with a zero interval", election.Every(0, func(context.Context, *term.Term) error { return nil }, nil)},
			{"a nil Option", nil},
		} {
			e, err := election.Start(s, "jobs", tc.opt)
			if !errors.Is(err, election.ErrInvalidOption) || e != nil {
				t.Fatalf("Start with %s = %v, %v; want ErrInvalidOption", tc.name, e, err)
			}
		}
		// Nothing was claimed: the name is free on the session.
		start(t, s, "jobs", election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error { <-ctx.Done(); return nil }))
		advance(time.Second)
	})
}

// Issue 20, item 4, a second Close: a Close made from a callback cannot wait
// for the session's callbacks (it is one of them) and returns
// ErrWouldBlockSelf; a Close made afterwards from outside returned at once
// all the same. It waits for every callback now.
func TestCloseAfterACloseFromACallbackWaitsForTheCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, newBackend(t))
		var revoked atomic.Bool
		selfErr := make(chan error, 1)
		start(t, s, "jobs", election.WithListener(election.Funcs{
			Elected: func(*term.Term) { selfErr <- s.Close() },
			Revoked: func(*term.Term, term.RevokeReason) {
				<-time.After(5 * time.Second) // a slow OnRevoked
				revoked.Store(true)
			},
		}))
		if err := <-selfErr; !errors.Is(err, session.ErrWouldBlockSelf) {
			t.Fatalf("Close from OnElected = %v, want ErrWouldBlockSelf", err)
		}
		err := s.Close()
		delivered := revoked.Load()
		advance(10 * time.Second) // what a failing Close left running ends, so that the test can
		if err != nil || !delivered {
			t.Fatalf("Close from outside = %v, OnRevoked delivered %v; want nil after the OnRevoked of the term the first Close ended", err, delivered)
		}
	})
}
