package zkbackend_test

import (
	"testing"
	"time"

	zkbackend "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// The leader of a private three-node ensemble is killed while a term is
// held. If the ensemble recovers within the session timeout, the Simba
// session survives with its id and its term; if it does not (no quorum),
// the term ends at the local deadline, before the session could expire.
func TestEnsembleLeaderKilled(t *testing.T) {
	zks := startZK(t, 3)
	srv := addrs(zks)

	t.Run("recovers within the timeout", func(t *testing.T) {
		const timeout = 10 * time.Second // grant 4.17s: room for an election
		s, ev := openEngine(t, newBackend(t, srv, newRoot(t)), timeout)
		r := claimName(t, s, "x")
		won := r.waitWon(t, 5*time.Second)
		id := s.ID()

		l := leader(t, zks)
		l.kill()
		killedAt := time.Now()
		for {
			e := ev.next(t, session.SessionRenewed, timeout)
			if e.Time.After(killedAt) {
				break
			}
		}
		t.Logf("renewed %v after the leader was killed", time.Since(killedAt))
		if s.ID() != id {
			t.Fatalf("session id changed from %s to %s: the session did not survive", id, s.ID())
		}
		select {
		case l := <-r.lost:
			t.Fatalf("term ended (%v) although the ensemble recovered within the timeout", l.reason)
		default:
		}
		if !won.t.Valid() {
			t.Fatal("term not valid after recovery")
		}
		for {
			select {
			case e := <-ev:
				if e.Kind == session.SessionExpired {
					t.Fatalf("SessionExpired after a recovered leader failure: %+v", e)
				}
				continue
			default:
			}
			break
		}
		l.restart()
		l.waitServing(60 * time.Second)
	})

	t.Run("no quorum: term ends at the local deadline", func(t *testing.T) {
		const timeout = 4 * time.Second
		b := newBackend(t, srv, newRoot(t))
		s, _ := openEngine(t, b, timeout)
		r := claimName(t, s, "y")
		won := r.waitWon(t, 10*time.Second)
		l := leader(t, zks)
		for _, z := range zks {
			if z != l {
				z.kill() // one follower: with the leader, the quorum is gone
				break
			}
		}
		l.kill()
		killedAt := time.Now()
		lost := r.waitLost(t, timeout)
		if lost.reason != term.DeadlinePassed {
			t.Fatalf("term ended with %v, want DEADLINE_PASSED", lost.reason)
		}
		// The local deadline is at most one grant after the last renewal,
		// which was sent before the kill.
		if el := lost.at.Sub(killedAt); el > zkbackend.Grant(timeout)+200*time.Millisecond {
			t.Fatalf("term ended %v after quorum loss, want within one grant (%v)", el, zkbackend.Grant(timeout))
		}
		if won.t.Valid() {
			t.Fatal("term still valid after its end")
		}
	})
}

// A paused server (SIGSTOP) answers nothing and expires nothing. The
// holder's term must end at its local deadline, while the server is still
// paused, so before the server could expire the session; once resumed the
// lease goes to a new term (of a new session) with a higher token.
func TestServerPausedTermEndsFirst(t *testing.T) {
	zks := startZK(t, 1)
	srv, root := addrs(zks), newRoot(t)
	const timeout = 2 * time.Second
	s, _ := openEngine(t, newBackend(t, srv, root), timeout)
	r := claimName(t, s, "x")
	won := r.waitWon(t, 5*time.Second)

	zks[0].pause()
	pausedAt := time.Now()
	lost := r.waitLost(t, timeout)
	if lost.reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v, want DEADLINE_PASSED", lost.reason)
	}
	if el := lost.at.Sub(pausedAt); el > zkbackend.Grant(timeout)+200*time.Millisecond {
		t.Fatalf("term ended %v after the pause, want within one grant (%v)", el, zkbackend.Grant(timeout))
	}
	// Keep the server stopped past the session timeout, so that on
	// resuming it finds the session due for expiry.
	<-time.After(timeout + 2*testTick)
	zks[0].resume()
	resumedAt := time.Now()
	if !lost.at.Before(resumedAt) {
		t.Fatal("term outlived the server's pause")
	}

	// The claim still wants x: once the server has ended the old session
	// (expired, or closed by the watchdog's closeSession that waited in
	// its socket), a new session wins x as a new term with a higher token.
	next := r.waitWon(t, 5*timeout)
	if !next.at.After(resumedAt) {
		t.Fatalf("new term won at %v, before the server resumed at %v", next.at, resumedAt)
	}
	if next.t.Token() <= won.t.Token() {
		t.Fatalf("token after takeover %d, want > %d", next.t.Token(), won.t.Token())
	}
	t.Logf("term ended %v after the pause; new term %v after resuming", lost.at.Sub(pausedAt), next.at.Sub(resumedAt))
}
