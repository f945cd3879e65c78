package zksimba_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// stamped is a term event with the time the engine reported it.
type stamped struct {
	t      *term.Term
	reason term.RevokeReason
	at     time.Time
}

// claimRec is a ClaimHandler that forwards what happens to channels.
type claimRec struct {
	won  chan stamped
	lost chan stamped
}

func newClaimRec() *claimRec {
	return &claimRec{won: make(chan stamped, 16), lost: make(chan stamped, 16)}
}

func (r *claimRec) Won(t *term.Term) {
	select {
	case r.won <- stamped{t: t, at: time.Now()}:
	default:
	}
}

func (r *claimRec) Lost(t *term.Term, reason term.RevokeReason) {
	select {
	case r.lost <- stamped{t: t, reason: reason, at: time.Now()}:
	default:
	}
}

func (r *claimRec) Closed() {}

func (r *claimRec) waitWon(t testing.TB, within time.Duration) stamped {
	t.Helper()
	select {
	case w := <-r.won:
		return w
	case <-time.After(within):
		t.Fatalf("no term won within %v", within)
	}
	return stamped{}
}

func (r *claimRec) waitLost(t testing.TB, within time.Duration) stamped {
	t.Helper()
	select {
	case l := <-r.lost:
		return l
	case <-time.After(within):
		t.Fatalf("term not lost within %v", within)
	}
	return stamped{}
}

// events collects a session's events.
type events chan session.Event

func (e events) listen(ev session.Event) {
	select {
	case e <- ev:
	default:
	}
}

// nextWithout waits for the next event of kind, dropping others, and
// fails on an event of kind not on the way.
func (e events) nextWithout(t testing.TB, kind, not session.EventKind, within time.Duration) session.Event {
	t.Helper()
	limit := time.After(within)
	for {
		select {
		case ev := <-e:
			switch ev.Kind {
			case kind:
				return ev
			case not:
				t.Fatalf("%v event before %v: %+v", not, kind, ev)
			}
		case <-limit:
			t.Fatalf("no %v event within %v", kind, within)
		}
	}
}

// next waits for the next event of kind, dropping others.
func (e events) next(t testing.TB, kind session.EventKind, within time.Duration) session.Event {
	t.Helper()
	limit := time.After(within)
	for {
		select {
		case ev := <-e:
			if ev.Kind == kind {
				return ev
			}
		case <-limit:
			t.Fatalf("no %v event within %v", kind, within)
		}
	}
}

func openEngine(t testing.TB, b driver.Backend, lease time.Duration) (*session.Session, events) {
	t.Helper()
	ev := make(events, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := session.Open(ctx, b,
		session.WithConfig(deadline.Config{LeaseDuration: lease}),
		session.WithListener(ev.listen),
		session.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, ev
}

func claimName(t testing.TB, s *session.Session, name string) *claimRec {
	t.Helper()
	r := newClaimRec()
	c, err := layer.MustOf(s).Claim(name, r)
	if err != nil {
		t.Fatalf("Claim(%q): %v", name, err)
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	return r
}

// With the default 15 s lease, ZooKeeper grants 5/12 × 15 s = 6.25 s per
// renewal, so the engine renews every third of the local validity
// (docs/design.md §8: ≈ 2.046 s). That is the backend's rule, so no
// warning; a server that clamps the timeout below the one asked for gets
// SessionLeaseShortened once.
func TestEngineLeaseShortened(t *testing.T) {
	// 5/12 of the timeout asked for is the backend's own rule: the engine
	// renews every ≈ 2.046 s without warning (OpenReply.Nominal).
	b := newBackend(t, standalone(t), newRoot(t))
	s, ev := openEngine(t, b, 15*time.Second)
	e := ev.nextWithout(t, session.SessionOpened, session.SessionLeaseShortened, 10*time.Second)
	cfg := s.Config()
	wantEvery, shortened := cfg.RenewEvery(6250 * time.Millisecond)
	if e.Remaining != 6250*time.Millisecond || !shortened {
		t.Fatalf("SessionOpened: Remaining %v; want 6.25s", e.Remaining)
	}
	if every := time.Duration(s.Snapshot().RenewEvery); every != wantEvery {
		t.Fatalf("RenewEvery = %v, want %v", every, wantEvery)
	}
	if d := wantEvery - 2046*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("RenewEvery = %v, want ≈ 2.046s", wantEvery)
	}
	if got, ok := b.SessionTimeout(s.ID()); !ok || got != 15*time.Second {
		t.Fatalf("negotiated timeout %v, want 15s", got)
	}
	ev.nextWithout(t, session.SessionRenewed, session.SessionLeaseShortened, 10*time.Second)

	// A server that clamps the timeout (maxSessionTimeout 20 s, 30 s asked
	// for) grants less than the rule: that still warns, once.
	s2, ev2 := openEngine(t, newBackend(t, standalone(t), newRoot(t)), 30*time.Second)
	e = ev2.next(t, session.SessionLeaseShortened, 10*time.Second)
	if want := zksimba.Grant(20 * time.Second); e.Remaining != want {
		t.Fatalf("SessionLeaseShortened: Remaining %v, want %v (5/12 of the clamped 20s)", e.Remaining, want)
	}
	if got, ok := b.SessionTimeout(s.ID()); !ok || got != 15*time.Second {
		t.Fatalf("first session's timeout %v", got)
	}
	_ = s2
}

// A holder cut off from ZooKeeper: its term ends at its local deadline,
// the server expires its session, and the waiting candidate's watch hands
// the lease over about one session timeout after the cut, never before
// the old term ended. Once back, the old node gets a new session.
func TestEngineCutHolderFailover(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const timeout = 2 * time.Second
	cut := &cutter{}
	sa, eva := openEngine(t, newBackend(t, srv, root, zksimba.WithDialer(cut.dial)), timeout)
	ra := claimName(t, sa, "x")
	wonA := ra.waitWon(t, 5*time.Second)
	sb, _ := openEngine(t, newBackend(t, srv, root), timeout)
	rb := claimName(t, sb, "x")
	oldID := sa.ID()

	cut.Cut()
	cutAt := time.Now()
	lostA := ra.waitLost(t, timeout)
	if lostA.reason != term.DeadlinePassed {
		t.Fatalf("cut holder's term ended with %v, want DEADLINE_PASSED", lostA.reason)
	}
	wonB := rb.waitWon(t, 3*timeout)
	if !lostA.at.Before(wonB.at) {
		t.Fatalf("candidate won at %v, before the holder's term ended (%v later)", wonB.at, lostA.at.Sub(wonB.at))
	}
	if el := wonB.at.Sub(cutAt); el < timeout-2*testTick || el > timeout+time.Second {
		t.Fatalf("failover took %v after the cut, want about the %v session timeout", el, timeout)
	}
	if wonB.t.Token() <= wonA.t.Token() {
		t.Fatalf("new token %d, want > %d", wonB.t.Token(), wonA.t.Token())
	}
	t.Logf("failover %v after the cut (session timeout %v); holder's term ended %v after the cut",
		wonB.at.Sub(cutAt), timeout, lostA.at.Sub(cutAt))

	// The engine gives the session up at its local deadline (it does not
	// wait to hear SESSION_EXPIRED from a backend it cannot reach).
	if e := eva.next(t, session.SessionDeadlinePassed, 10*time.Second); e.Session != oldID {
		t.Fatalf("SessionDeadlinePassed for %q, want the cut session %s", e.Session, oldID)
	}
	cut.Heal()
	var opened session.Event
	for opened.Session == "" || opened.Session == oldID {
		opened = eva.next(t, session.SessionOpened, 15*time.Second)
	}
	if sa.ID() == oldID {
		t.Fatalf("holder still on session %s after expiry", oldID)
	}
}

// The namespace root deleted under two engines (an operator's deleteall):
// the holder's term ends (its renewal answers ErrExpired), the candidate's
// backend reports the quarantine (BackendQuarantined), and the next term
// begins after the old one ended and one MaxLease after the loss, with a
// higher token.
func TestEngineRootDeletedNoOverlap(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const lease, maxLease = 2 * time.Second, 2 * time.Second
	sa, _ := openEngine(t, newBackend(t, srv, root, zksimba.WithMaxLease(maxLease)), lease)
	ra := claimName(t, sa, "x")
	wonA := ra.waitWon(t, 5*time.Second)
	sb, evb := openEngine(t, newBackend(t, srv, root, zksimba.WithMaxLease(maxLease)), lease)
	rb := claimName(t, sb, "x")

	lostAt := time.Now()
	deleteAll(t, rawConn(t, srv), root)
	lostA := ra.waitLost(t, lease)
	q := evb.next(t, session.BackendQuarantined, 2*lease)
	if q.Remaining <= 0 || q.Remaining > maxLease {
		t.Fatalf("BackendQuarantined Remaining %v, want in (0, %v]", q.Remaining, maxLease)
	}
	var won stamped // the candidate's, or the old holder's new session's
	select {
	case won = <-rb.won:
	case won = <-ra.won:
	case <-time.After(3 * maxLease):
		t.Fatalf("no new term within %v of the loss", 3*maxLease)
	}
	if !lostA.at.Before(won.at) {
		t.Fatalf("new term at %v, before the old one ended (%v)", won.at, lostA.at)
	}
	if el := won.at.Sub(lostAt); el < maxLease-200*time.Millisecond {
		t.Fatalf("new term %v after the loss, before one MaxLease (%v)", el, maxLease)
	}
	if won.t.Token() <= wonA.t.Token() {
		t.Fatalf("token after the loss %d, want > %d", won.t.Token(), wonA.t.Token())
	}
	t.Logf("old term ended %v after the loss (%v), new term %v after it, quarantine announced %v", lostA.at.Sub(lostAt), lostA.reason, won.at.Sub(lostAt), q.Remaining)
}
