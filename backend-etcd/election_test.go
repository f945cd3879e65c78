package etcdsimba_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

type stamped struct {
	t      *term.Term
	reason term.RevokeReason
	at     time.Time
}

func openEngine(t testing.TB, b driver.Backend, lease time.Duration) *session.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := session.Open(ctx, b, session.WithConfig(deadline.Config{LeaseDuration: lease}),
		session.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startElection(t testing.TB, s *session.Session, name string, opts ...election.Option) (*election.Election, chan stamped, chan stamped) {
	t.Helper()
	won, lost := make(chan stamped, 64), make(chan stamped, 64)
	e, err := election.Start(s, name, append([]election.Option{election.WithListener(election.Funcs{
		Elected: func(tm *term.Term) { won <- stamped{t: tm, at: time.Now()} },
		Revoked: func(tm *term.Term, r term.RevokeReason) { lost <- stamped{t: tm, reason: r, at: time.Now()} },
	})}, opts...)...)
	if err != nil {
		t.Fatalf("election.Start: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, won, lost
}

func waitStamped(t testing.TB, ch <-chan stamped, within time.Duration, what string) stamped {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(within):
		t.Fatalf("no %s within %v", what, within)
	}
	return stamped{}
}

// TestElectionHandoverViaWatch runs the election engine on etcd: a
// voluntary handover reaches the candidate through the watch, far sooner
// than its periodic retry, after the old term was revoked, with a higher
// token.
func TestElectionHandoverViaWatch(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	s1 := openEngine(t, newBackend(t, cli, ns), 15*time.Second)
	s2 := openEngine(t, newBackend(t, cli, ns), 15*time.Second)
	e1, won1, lost1 := startElection(t, s1, "leader")
	first := waitStamped(t, won1, 5*time.Second, "first leader")
	attempted := make(chan struct{}, 1)
	_, won2, _ := startElection(t, s2, "leader", election.OnAttempt(func(error) {
		select {
		case attempted <- struct{}{}:
		default:
		}
	}))
	select { // the candidate has tried and waits
	case <-attempted:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidate made no attempt within 5s")
	}
	start := time.Now()
	if err := e1.Stop(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	next := waitStamped(t, won2, 2*time.Second, "handover (the periodic retry would take seconds)")
	revoked := waitStamped(t, lost1, time.Second, "OnRevoked of the old leader")
	if revoked.reason != term.Stopped {
		t.Errorf("old term revoked with %v, want STOPPED", revoked.reason)
	}
	if next.t.Token() <= first.t.Token() {
		t.Errorf("new token %v not above %v", next.t.Token(), first.t.Token())
	}
	t.Logf("handover took %v", next.at.Sub(start))
}
