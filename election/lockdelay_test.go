package election_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// A leader whose session expires leaves the name to nobody for the
// election's lock-delay, on the backend's clock: the candidate (and the old
// leader, back on a new session) wins only then, with a higher token. A
// StepDown releases: the candidate wins at once (ADR 0240).
func TestElectionLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 20 * time.Second
		b, _ := memory.New(memory.WithMaxLockDelay(delay))
		var mu sync.Mutex
		var won []time.Time
		elected := election.Funcs{Elected: func(*term.Term) { mu.Lock(); won = append(won, time.Now()); mu.Unlock() }}
		sa, sb := open(t, b), open(t, b.NewClient())
		a := start(t, sa, "jobs", election.WithLockDelay(delay), election.WithListener(elected))
		c := start(t, sb, "jobs", election.WithLockDelay(delay), election.WithListener(elected))
		first := a.Term()
		if first == nil || c.Status() != election.Candidate {
			t.Fatalf("statuses %v %v, want LEADER CANDIDATE", a.Status(), c.Status())
		}
		expired := time.Now()
		b.Expire(sa.ID())
		advance(delay - time.Millisecond)
		if _, tok, ok := b.Owner("jobs"); ok {
			t.Fatalf("the name was won again (token %d) %v after the leader's session expired, within the lock-delay of %v", tok, time.Since(expired), delay)
		}
		advance(time.Minute)
		_, tok, ok := b.Owner("jobs")
		if !ok || tok <= first.Token() {
			t.Fatalf("after the lock-delay: owner %v token %d, want a new term above %d", ok, tok, first.Token())
		}
		mu.Lock()
		if last := won[len(won)-1]; last.Sub(expired) < delay {
			t.Errorf("elected %v after the expiry, within the lock-delay %v", last.Sub(expired), delay)
		}
		mu.Unlock()
		// A StepDown releases the lease: the other one wins at once.
		leader, other := a, c
		if c.Status() == election.Leader {
			leader, other = c, a
		}
		if err := leader.StepDown(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if other.Status() != election.Leader {
			t.Fatalf("after a StepDown: the candidate is %v, want LEADER at once: a release skips the lock-delay", other.Status())
		}
	})
}

// A lock-delay the backend refuses (above its WithMaxLockDelay) stops the
// election instead of retrying at every tick: OnAttempt hears the error,
// the status is STOPPED, Start with WaitFirstAttempt returns the error, and
// the name can be started again.
func TestElectionStopsWhenItsLockDelayIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t) // WithMaxLockDelay 0: every delay is refused
		s := open(t, b)
		var attempts []error
		e := start(t, s, "jobs", election.WithLockDelay(time.Second), election.OnAttempt(func(err error) { attempts = append(attempts, err) }))
		before := b.Stats().Acquire
		advance(time.Minute)
		if n := b.Stats().Acquire - before; n != 0 {
			t.Errorf("%d more Acquire calls after the refusal, want none", n)
		}
		if e.Status() != election.Stopped || len(attempts) != 1 || !errors.Is(attempts[0], session.ErrLockDelay) {
			t.Fatalf("status %v, attempts %v: want STOPPED after one attempt refused with ErrLockDelay", e.Status(), attempts)
		}
		if err := e.StepDown(context.Background(), time.Second); !errors.Is(err, election.ErrStopped) {
			t.Errorf("StepDown of the stopped election: %v, want ErrStopped", err)
		}
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		_, err := election.Start(s, "jobs", election.WithLockDelay(time.Second), election.WaitFirstAttempt(context.Background()))
		if !errors.Is(err, session.ErrLockDelay) || !strings.Contains(err.Error(), "WithMaxLockDelay") {
			t.Fatalf("Start with WaitFirstAttempt: %v, want an error wrapping ErrLockDelay naming WithMaxLockDelay", err)
		}
		if _, err := election.Start(s, "jobs", election.WithLockDelay(-time.Second)); !errors.Is(err, election.ErrInvalidOption) {
			t.Errorf("WithLockDelay(-1s): %v, want ErrInvalidOption", err)
		}
		if e := start(t, s, "jobs"); e.Status() != election.Leader {
			t.Errorf("the name started again without a delay: %v, want LEADER", e.Status())
		}
	})
}
