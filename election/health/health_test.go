package health_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/election/health"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

func open(t *testing.T) (*memory.Backend, *session.Session) {
	t.Helper()
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil),
		session.WithConfig(deadline.Config{LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return b, s
}

func status(c *health.Checker) (int, string) {
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code, rec.Body.String()
}

func TestUnhealthyWhenNotLivePastTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := open(t)
		c := health.New(s, health.NotLiveFor(6*time.Second))
		if code, body := status(c); code != 200 || body != "ok\n" {
			t.Fatalf("healthy session: %d %q", code, body)
		}
		b.FailCalls(errors.New("connection refused"))
		advance(5*time.Second + time.Millisecond) // the renewal fails: SUSPENDED
		if err := c.Check(nil); err != nil {
			t.Fatalf("just SUSPENDED: %v, want healthy within the bound", err)
		}
		advance(6 * time.Second)
		err := c.Check(nil)
		if !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), "SUSPENDED") {
			t.Fatalf("SUSPENDED past the bound: %v", err)
		}
		if code, body := status(c); code != 503 || !strings.Contains(body, "SUSPENDED") {
			t.Fatalf("ServeHTTP: %d %q", code, body)
		}
		advance(10 * time.Second) // the deadline passed: OPENING, still failing
		if err := c.Check(nil); err == nil || !strings.Contains(err.Error(), "OPENING") {
			t.Fatalf("OPENING past the bound: %v", err)
		}
		b.FailCalls(nil)
		advance(5 * time.Second)
		if err := c.Check(nil); err != nil {
			t.Fatalf("LIVE again: %v", err)
		}
		_ = s.Close()
		if err := c.Check(nil); !errors.Is(err, health.ErrUnhealthy) {
			t.Fatalf("closed session: %v", err)
		}
	})
}

func TestUnhealthyWhenATaskRunsOnAfterItsTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := open(t)
		stubborn := make(chan struct{})
		e, err := election.Start(s, "jobs", election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stubborn // ignores ctx: keeps acting after the term
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		c := health.New(s, health.Watch(e), health.TaskGrace(2*time.Second), health.NotLiveFor(time.Hour))
		if err := c.Check(nil); err != nil {
			t.Fatalf("leading: %v", err)
		}
		b.Expire(s.ID()) // the holder hears the notice: its term ends at once (ADR 0228)
		synctest.Wait()
		if e.Overrun() != 0 {
			t.Fatalf("Overrun right after the term ended = %v", e.Overrun())
		}
		if err := c.Check(nil); err != nil {
			t.Fatalf("within the grace: %v", err)
		}
		advance(3 * time.Second)
		err = c.Check(nil)
		if !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), `"jobs"`) {
			t.Fatalf("task past its term: %v", err)
		}
		close(stubborn)
		synctest.Wait()
		if err := c.Check(nil); err != nil {
			t.Fatalf("task returned: %v", err)
		}
		_ = e.Stop(context.Background())
	})
}
