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
