package session_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
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
		var cs []layer.Claim
		rs := make([]*recorder, 5)
		for i, name := range []string{"p.0", "p.1", "p.2", "p.3", "p.4"} {
			rs[i] = &recorder{}
			c, err := layer.MustOf(s).Claim(name, rs[i])
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		before := b.Stats().Acquire
		layer.MustOf(s).Do(func() { layer.MustOf(s).WantAll(cs) })
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
		c, _ := layer.MustOf(s).Claim("x.1", &recorder{})
		layer.MustOf(s).Do(func() { c.Want(true) })
		time.Sleep(time.Millisecond)
		synctest.Wait()
		hs, err := s.Inspect(context.Background(), driver.InspectRequest{Prefix: "x."})
		if err != nil || len(hs) != 1 || hs[0].Name != "x.1" || hs[0].Owner.Identity != "me" || hs[0].Session != s.ID() {
			t.Fatalf("Inspect = %+v, %v", hs, err)
		}
		got := make(chan []driver.Holder, 1)
		e := layer.MustOf(s)
		e.Do(func() {
			e.Call(func(ctx context.Context) (any, error) {
				return s.Inspect(ctx, driver.InspectRequest{Names: []string{"x.1"}})
			}, func(v any, err error) { hs, _ := v.([]driver.Holder); got <- hs })
		})
		if hs := <-got; len(hs) != 1 {
			t.Fatalf("Inspect through Call = %+v", hs)
		}
		if !s.CanInspect() {
			t.Fatal("CanInspect on the memory backend = false")
		}

		s2, err := session.Open(context.Background(), bare{b}, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if _, err := s2.Inspect(context.Background(), driver.InspectRequest{}); !errors.Is(err, session.ErrNoInspector) || s2.CanInspect() {
			t.Fatalf("Inspect without an Inspector = %v, want ErrNoInspector", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var cerr error
		e.Do(func() {
			e.Call(func(context.Context) (any, error) { t.Error("op ran after Close"); return nil, nil },
				func(_ any, err error) { cerr = err })
		})
		if !errors.Is(cerr, session.ErrClosed) {
			t.Fatalf("Call after Close = %v, want ErrClosed", cerr)
		}
	})
}

// A layer's call that outlives one renewal period is answered with
// DeadlineExceeded, and what the late op returns is never handed to reply
// (run with -race: reading it would race with the op still writing it).
func TestCallTimesOut(t *testing.T) {
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
		e := layer.MustOf(s)
		got := make(chan error, 1)
		e.Do(func() {
			e.Call(func(ctx context.Context) (any, error) {
				<-ctx.Done()
				return "late", nil
			}, func(v any, err error) {
				if v != nil {
					t.Errorf("reply got %v from a timed-out op", v)
				}
				got <- err
			})
		})
		if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Call of a slow op = %v, want DeadlineExceeded", err)
		}
	})
}
