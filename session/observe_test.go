package session_test

import (
	"context"
	"errors"
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

type ctxKey struct{}

func TestTermContextDecoratorReachesTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		var seen []session.Event
		s, err := session.Open(context.Background(), b, session.WithLogger(nil),
			session.WithTermContext(func(parent context.Context, e session.Event) context.Context {
				seen = append(seen, e)
				return context.WithValue(parent, ctxKey{}, e.Token)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, err := layer.MustOf(s).Claim("jobs", &recorder{})
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		var tm *term.Term
		layer.MustOf(s).Do(func() { tm = c.Term() })
		if tm == nil {
			t.Fatal("no term")
		}
		if got := tm.Context().Value(ctxKey{}); got != tm.Token() {
			t.Fatalf("term context value = %v, want the token %d", got, tm.Token())
		}
		if e, ok := layer.FromContext(tm.Context()); !ok || e != layer.MustOf(s) {
			t.Fatal("a decorated term context lost its session")
		}
		if len(seen) != 1 || seen[0].Kind != session.TermElected || seen[0].Name != "jobs" || seen[0].Session != s.ID() || seen[0].Time.IsZero() {
			t.Fatalf("decorator saw %+v, want one TermElected of jobs on %s", seen, s.ID())
		}
	})
}

func TestTermContextDecoratorNotDerivedIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s, err := session.Open(context.Background(), b, session.WithLogger(nil),
			session.WithTermContext(func(context.Context, session.Event) context.Context { return context.Background() }))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, _ := layer.MustOf(s).Claim("jobs", &recorder{})
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		var tm *term.Term
		layer.MustOf(s).Do(func() { tm = c.Term() })
		if e, ok := layer.FromContext(tm.Context()); !ok || e != layer.MustOf(s) {
			t.Fatal("a decorator returning an unrelated context cut the term off its session")
		}
	})
}

func TestRevokedEventCarriesTheLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("jobs")
		f.b.FailCalls(errors.New("connection refused"))
		remaining := r.terms()[0].Remaining()
		want := time.Now().Add(remaining)
		advance(remaining + time.Second)
		ev, ok := f.ev.last(session.TermRevoked)
		if !ok || ev.Reason != term.DeadlinePassed {
			t.Fatalf("TermRevoked = %+v, want DEADLINE_PASSED", ev)
		}
		if !ev.Deadline.Equal(want) {
			t.Fatalf("Deadline = %v, want %v", ev.Deadline, want)
		}
		if ev.Time.Before(ev.Deadline) {
			t.Fatalf("noticed at %v, before the deadline %v", ev.Time, ev.Deadline)
		}
	})
}

func TestStateSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		advance(7 * time.Second)
		if st, d := f.s.StateSince(); st != session.Live || d != 7*time.Second {
			t.Fatalf("StateSince = %v %v, want LIVE 7s (renewals keep it LIVE, not renew the clock)", st, d)
		}
		f.b.FailCalls(errors.New("connection refused"))
		advance(5 * time.Second) // the renewal at 10s fails
		st, d := f.s.StateSince()
		if st != session.Suspended || d != 2*time.Second {
			t.Fatalf("StateSince = %v %v, want SUSPENDED 2s", st, d)
		}
		if snap := f.s.Snapshot(); snap.InState != session.Duration(d) {
			t.Fatalf("Snapshot().InState = %v, want %v", snap.InState, d)
		}
	})
}

// plain hides the memory backend's optional capabilities.
type plain struct{ session.Backend }

func TestWatchNoticesWithoutBroadcaster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := openDecorated(t, plain{b})
		if _, ok := s.WatchNotices(func(driver.Notice) {}); ok {
			t.Fatal("WatchNotices reported notices from a backend that does not broadcast")
		}
	})
}

func TestWatchNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		c, _ := f.claim("jobs")
		var got []driver.Notice
		stop, ok := f.s.WatchNotices(func(n driver.Notice) { got = append(got, n) })
		if !ok {
			t.Fatal("WatchNotices: the memory backend broadcasts")
		}
		layer.MustOf(f.s).Do(func() { c.Release(term.Stopped, nil) })
		synctest.Wait()
		if len(got) == 0 || got[0].Name != "jobs" {
			t.Fatalf("notices = %v, want the release of jobs", got)
		}
		stop()
		n := len(got)
		c2, _ := layer.MustOf(f.s).Claim("other", &recorder{})
		layer.MustOf(f.s).Do(func() { c2.Want(true) })
		synctest.Wait()
		layer.MustOf(f.s).Do(func() { c2.Release(term.Stopped, nil) })
		synctest.Wait()
		if len(got) != n {
			t.Fatalf("notices after stop: %v", got[n:])
		}
	})
}
