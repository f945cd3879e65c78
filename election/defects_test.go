package election_test

import (
	"context"
	"errors"
	"fmt"
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

// Defect 4 of issue 9: an executor that accepted OnElected and refuses the
// term's OnRevoked must not leave the listener believing it still leads:
// OnRevoked is delivered by the fallback (on the delivering goroutine).
func TestRefusedOnRevokedIsStillDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var accepted atomic.Int32
		onlyFirst := election.ExecutorFunc(func(f func()) error {
			if accepted.Add(1) > 1 {
				return errors.New("shutting down")
			}
			go f()
			return nil
		})
		var mu sync.Mutex
		var got []string
		e := start(t, open(t, b), "jobs", election.WithExecutor(onlyFirst), election.WithListener(election.Funcs{
			Elected: func(*term.Term) { mu.Lock(); got = append(got, "elected"); mu.Unlock() },
			Revoked: func(_ *term.Term, r term.RevokeReason) {
				mu.Lock()
				got = append(got, "revoked "+r.String())
				mu.Unlock()
			},
		}))
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 2 || got[1] != "revoked STOPPED" {
			t.Fatalf("callbacks %v, want [elected, revoked STOPPED]", got)
		}
	})
}

// Defect 8 of issue 9: a single-term election took a second term after
// StepDown or an executor refusal. Single-term is terminal.
func TestSingleTermIsTerminal(t *testing.T) {
	t.Run("step down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBackend(t)
			var elected atomic.Int32
			e := start(t, open(t, b), "lock", election.SingleTerm("lock"), election.WithListener(election.Funcs{
				Elected: func(*term.Term) { elected.Add(1) },
			}))
			if err := e.StepDown(context.Background(), time.Second); err != nil {
				t.Fatal(err)
			}
			advance(time.Minute)
			if n := elected.Load(); n != 1 || e.Status() != election.Stopped {
				t.Fatalf("%d terms, status %v after StepDown of a single-term election; want 1, STOPPED", n, e.Status())
			}
			if _, _, ok := b.Owner("lock"); ok {
				t.Fatal("the lease is held again")
			}
		})
	})
	t.Run("refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBackend(t)
			refusing := election.ExecutorFunc(func(func()) error { return errors.New("pool saturated") })
			e := start(t, open(t, b), "lock", election.SingleTerm("lock"), election.WithExecutor(refusing))
			attempts := b.Stats().Acquire
			advance(time.Minute)
			if n := b.Stats().Acquire - attempts; n != 0 || e.Status() != election.Stopped {
				t.Fatalf("%d attempts, status %v after a refused single term; want 0, STOPPED", n, e.Status())
			}
		})
	})
}

// Defect 11 of issue 9: ErrWouldBlockSelf was session-wide although
// documented per election: B.Stop from election A's callback did not wait,
// though B's handover does not depend on A. It waits now, unless A's
// callback runs on the delivery loop (Direct), which B's handover needs.
func TestStopOfAnotherElectionFromACallbackWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		exec election.Executor
		want error
	}{{"goroutines", election.Goroutines{}, nil}, {"direct", election.Direct{}, election.ErrWouldBlockSelf}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := open(t, newBackend(t))
				var revokedB atomic.Bool
				eb := start(t, s, "b", election.WithListener(election.Funcs{
					Revoked: func(*term.Term, term.RevokeReason) { revokedB.Store(true) },
				}))
				got := make(chan error, 1)
				var sawRevoked atomic.Bool
				start(t, s, "a", election.WithExecutor(tc.exec), election.WithListener(election.Funcs{
					Elected: func(tm *term.Term) {
						for _, ctx := range []context.Context{tm.Context(), context.Background()} {
							err := eb.Stop(ctx)
							if err != nil {
								got <- err
								return
							}
						}
						sawRevoked.Store(revokedB.Load())
						got <- nil
					},
				}))
				err := <-got
				if !errors.Is(err, tc.want) && err != tc.want {
					t.Fatalf("B.Stop from A's callback = %v, want %v", err, tc.want)
				}
				if tc.want == nil && !sawRevoked.Load() {
					t.Fatal("B.Stop returned before B's OnRevoked")
				}
			})
		})
	}
}

// Defect 7 of issue 9: Close returned before its own callbacks were
// delivered when another goroutine was running the delivery loop (here, a
// user's StepDown held up in a slow event listener). Close returns only
// after every callback it caused has run.
func TestCloseWaitsForItsCallbacksWhileAnotherGoroutineDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		gate := make(chan struct{})
		var once sync.Once
		slow := func(e session.Event) {
			if e.Kind == session.TermRevoked {
				once.Do(func() { <-gate }) // the delivering goroutine is held up here
			}
		}
		s, err := session.Open(context.Background(), b, session.WithListener(slow), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		ea := start(t, s, "a")
		var revoked atomic.Bool
		start(t, s, "b", election.WithListener(election.Funcs{
			Revoked: func(*term.Term, term.RevokeReason) { revoked.Store(true) },
		}))
		go func() { _ = ea.StepDown(context.Background(), time.Hour) }() // delivers, and is held up
		synctest.Wait()
		var revokedAtClose atomic.Bool
		closed := make(chan struct{})
		go func() {
			_ = s.Close()
			revokedAtClose.Store(revoked.Load())
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while its own deliveries were still queued behind another goroutine")
		default:
		}
		close(gate)
		<-closed
		if !revokedAtClose.Load() {
			t.Fatal("Close returned before B's OnRevoked ran")
		}
	})
}

// slowRelease delays every Release before the backend acts on it.
type slowRelease struct {
	*memory.Backend
}

func (s slowRelease) Release(ctx context.Context, req driver.ReleaseRequest) error {
	<-time.After(2 * time.Second)
	return s.Backend.Release(ctx, req)
}

// OnRevoked of a voluntary handover comes after the backend answered the
// release, so a listener that hands the resource on sees the lease gone.
// (Found by the mutation gate: TestVoluntaryHandoverOrder's release is
// answered at once.)
//
// Both ways a Stop releases: with a deadline the release runs on a
// goroutine of its own while the caller delivers what the stop deferred
// (where an OnRevoked queued too early shows); without one it runs on the
// caller's goroutine (ADR 0121).
func TestOnRevokedAfterTheReleaseIsAnswered(t *testing.T) {
	for _, deadline := range []bool{true, false} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				var heldAtRevoke atomic.Bool
				e := start(t, open(t, slowRelease{b}), "jobs", election.WithListener(election.Funcs{
					Revoked: func(*term.Term, term.RevokeReason) {
						_, _, ok := b.Owner("jobs")
						heldAtRevoke.Store(ok)
					},
				}))
				ctx := context.Background()
				if deadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				if err := e.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				if heldAtRevoke.Load() {
					t.Fatal("OnRevoked ran while the backend still held the lease: before the release was answered")
				}
			})
		})
	}
}
