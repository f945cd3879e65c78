package session_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

// WantAll sends the attempts of many claims in one backend call (Want one
// by one sends the first alone, then the rest).
func TestWantAllIsOneAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s, err := session.Open(context.Background(), b, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var cs []*session.Claim
		rs := make([]*recorder, 5)
		for i, name := range []string{"p.0", "p.1", "p.2", "p.3", "p.4"} {
			rs[i] = &recorder{}
			c, err := s.Claim(name, rs[i])
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		before := b.Stats().Acquire
		s.Do(func() { session.WantAll(cs) })
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := b.Stats().Acquire - before; got != 1 {
			t.Fatalf("WantAll of 5 claims made %d Acquire calls, want 1", got)
		}
		for i, r := range rs {
			if len(r.terms()) != 1 {
				t.Fatalf("claim %d won %d terms, want 1", i, len(r.terms()))
			}
		}
	})
}

type bare struct{ session.Backend }

func TestInspect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s, err := session.Open(context.Background(), b, session.WithLogger(nil), session.WithIdentity("me", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, _ := s.Claim("x.1", &recorder{})
		s.Do(func() { c.Want(true) })
		time.Sleep(time.Millisecond)
		synctest.Wait()
		hs, err := s.Inspect(context.Background(), session.InspectRequest{Prefix: "x."})
		if err != nil || len(hs) != 1 || hs[0].Name != "x.1" || hs[0].Owner.Identity != "me" || hs[0].Session != s.ID() {
			t.Fatalf("Inspect = %+v, %v", hs, err)
		}
		got := make(chan []session.Holder, 1)
		s.Do(func() {
			s.InspectLater(session.InspectRequest{Names: []string{"x.1"}}, func(hs []session.Holder, err error) { got <- hs })
		})
		if hs := <-got; len(hs) != 1 {
			t.Fatalf("InspectLater = %+v", hs)
		}
		if !s.CanInspect() {
			t.Fatal("CanInspect on the memory backend = false")
		}

		s2, err := session.Open(context.Background(), bare{b}, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if _, err := s2.Inspect(context.Background(), session.InspectRequest{}); !errors.Is(err, session.ErrNoInspector) || s2.CanInspect() {
			t.Fatalf("Inspect without an Inspector = %v, want ErrNoInspector", err)
		}
		var lerr error
		s2.Do(func() { s2.InspectLater(session.InspectRequest{}, func(_ []session.Holder, err error) { lerr = err }) })
		if !errors.Is(lerr, session.ErrNoInspector) {
			t.Fatalf("InspectLater without an Inspector = %v", lerr)
		}
	})
}
