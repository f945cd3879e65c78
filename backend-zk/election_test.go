package zksimba_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// elected starts an election for name on s and returns a channel of its
// terms (OnElected) and of its revocations.
func startElection(t testing.TB, s *session.Session, name string) (*election.Election, chan stamped, chan stamped) {
	t.Helper()
	won, lost := make(chan stamped, 64), make(chan stamped, 64)
	e, err := election.Start(s, name, election.WithListener(election.Funcs{
		Elected: func(tm *term.Term) { won <- stamped{t: tm, at: time.Now()} },
		Revoked: func(tm *term.Term, r term.RevokeReason) { lost <- stamped{t: tm, reason: r, at: time.Now()} },
	}))
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

// A voluntary handover on ZooKeeper goes through the watch: the candidate
// is elected right after the leader's Stop, far sooner than its periodic
// retry (at least renewInterval/2 = 2.5 s with the default lease), and
// only after the old term was revoked.
func TestElectionHandoverViaWatch(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	s1, _ := openEngine(t, newBackend(t, srv, root), 15*time.Second)
	s2, _ := openEngine(t, newBackend(t, srv, root), 15*time.Second)
	e1, won1, lost1 := startElection(t, s1, "leader")
	first := waitStamped(t, won1, 5*time.Second, "first leader")
	_, won2, _ := startElection(t, s2, "leader")

	start := time.Now()
	if err := e1.Stop(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	next := waitStamped(t, won2, 2*time.Second, "handover (the periodic retry would take ≥ 2.5 s)")
	revoked := waitStamped(t, lost1, time.Second, "OnRevoked of the old leader")
	if revoked.reason != term.Stopped {
		t.Fatalf("old term revoked with %v, want STOPPED", revoked.reason)
	}
	select {
	case <-first.t.Done():
	default:
		t.Fatal("new leader elected while the old term was not revoked")
	}
	if next.t.Token() <= first.t.Token() {
		t.Fatalf("new token %d, want > %d", next.t.Token(), first.t.Token())
	}
	t.Logf("handover took %v", next.at.Sub(start))
}

// BenchmarkElectionHandover measures the voluntary handover end to end on
// the engine and election: from the leader's Stop call to the candidate's
// OnElected, with the release broadcast by a ZooKeeper watch. The old
// leader then starts again as the candidate.
func BenchmarkElectionHandover(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	ss := []*session.Session{}
	for range 2 {
		s, _ := openEngine(b, newBackend(b, srv, root), 15*time.Second)
		ss = append(ss, s)
	}
	type side struct {
		e        *election.Election
		won, rev chan stamped
	}
	start := func(s *session.Session) side {
		e, w, r := startElection(b, s, "leader")
		return side{e, w, r}
	}
	leader := start(ss[0])
	waitStamped(b, leader.won, 5*time.Second, "first leader")
	cand := start(ss[1])
	li := 0
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := leader.e.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		w := waitStamped(b, cand.won, 5*time.Second, "handover")
		lat = append(lat, w.at.Sub(t0))
		b.StopTimer()
		li = 1 - li
		leader, cand = cand, start(ss[1-li])
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	reportPercentiles(b, lat, "handover")
}
