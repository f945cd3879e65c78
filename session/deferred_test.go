package session_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// counting is the memory backend with its Open and Subscribe calls counted.
type counting struct {
	*memory.Backend
	opens, subs atomic.Int32
}

func (c *counting) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	c.opens.Add(1)
	return c.Backend.Open(ctx, req)
}

func (c *counting) Subscribe(fn func(driver.Notice)) (func(), error) {
	c.subs.Add(1)
	return c.Backend.Subscribe(fn)
}

func newCounting(t *testing.T) *counting {
	t.Helper()
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return &counting{Backend: m}
}

// A session built WithDeferredStart touches the backend only on Start
// (fxsimba builds it in a constructor and starts it in a start hook, after
// the backend's own hooks have created its schema).
func TestDeferredStartDoesNoIOUntilStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCounting(t)
		s, err := session.New(b, session.WithDeferredStart(), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		advance(time.Minute)
		if o, n := b.opens.Load(), b.subs.Load(); o != 0 || n != 0 {
			t.Fatalf("before Start: %d Open and %d Subscribe calls, want none", o, n)
		}
		if st := s.State(); st != session.Opening {
			t.Fatalf("before Start: state %v, want %v", st, session.Opening)
		}
		if _, ok := s.WatchNotices(func(session.Notice) {}); !ok {
			t.Fatal("WatchNotices before Start reports a broadcasting backend as not broadcasting")
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		<-s.Ready()
		if err := s.Start(); err != nil {
			t.Fatalf("second Start: %v, want nil", err)
		}
		advance(time.Second)
		if o, n := b.opens.Load(), b.subs.Load(); o != 1 || n != 1 {
			t.Fatalf("after two Starts: %d Open and %d Subscribe calls, want 1 and 1", o, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Closing a session that was never started touches nothing; starting it
// afterwards is refused with ErrClosed and leaves no subscription.
func TestDeferredStartAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCounting(t)
		s, err := session.New(b, session.WithDeferredStart(), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); !errors.Is(err, session.ErrClosed) {
			t.Fatalf("Start after Close = %v, want ErrClosed", err)
		}
		if o := b.opens.Load(); o != 0 {
			t.Fatalf("%d Open calls on a session closed before Start, want none", o)
		}
	})
}

// Open opens: given WithDeferredStart (a shared option list, say), it
// starts the session instead of waiting for a Start nobody will call.
func TestOpenStartsADeferredSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCounting(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := session.Open(ctx, b, session.WithDeferredStart(), session.WithLogger(nil))
		if err != nil {
			t.Fatalf("Open with WithDeferredStart: %v, want it open", err)
		}
		if o := b.opens.Load(); o != 1 {
			t.Fatalf("%d Open calls, want 1", o)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Start after Close is refused even when the session was started before
// (fx stopping an app and starting it again): a nil would let the caller
// run on a closed session.
func TestStartAfterCloseOfAStartedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCounting(t)
		s, err := session.New(b, session.WithDeferredStart(), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		<-s.Ready()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); !errors.Is(err, session.ErrClosed) {
			t.Fatalf("Start after Close of a started session = %v, want ErrClosed", err)
		}
	})
}
