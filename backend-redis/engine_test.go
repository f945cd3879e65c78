package redissimba_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Engine-level failure tests: a session.Session on a private redis-server
// that the test pauses, restarts or cuts off.

// observed wraps the backend to record the last successful renewal (its
// send time and the remaining time Redis reported) and, when failClose is
// set, to refuse Close, so that an abandoned session stays on Redis until
// Redis expires it. Embedding keeps Subscribe, so the engine still finds
// the Broadcaster.
type observed struct {
	*redissimba.Backend
	failClose atomic.Bool

	mu     sync.Mutex
	sentOK time.Time
	remOK  time.Duration
}

func (o *observed) record(sent time.Time, rem time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sentOK, o.remOK = sent, rem
}

// redisFreesAfter is the earliest time Redis can free the session's leases:
// Redis ran the last successful renewal after it was sent, and then had
// remOK left.
func (o *observed) redisFreesAfter() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sentOK.Add(o.remOK)
}

func (o *observed) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	sent := time.Now()
	r, err := o.Backend.Open(ctx, req)
	if err == nil {
		o.record(sent, r.Remaining)
	}
	return r, err
}

func (o *observed) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	sent := time.Now()
	r, err := o.Backend.Renew(ctx, req)
	if err == nil {
		o.record(sent, r.Remaining)
	}
	return r, err
}

var errCloseRefused = errors.New("test: Close refused")

func (o *observed) Close(ctx context.Context, id driver.ID) error {
	if o.failClose.Load() {
		return errCloseRefused
	}
	return o.Backend.Close(ctx, id)
}

// claimRec is a ClaimHandler that reports terms on channels.
type claimRec struct {
	won  chan *term.Term
	lost chan term.RevokeReason
}

func newClaimRec() *claimRec {
	return &claimRec{won: make(chan *term.Term, 16), lost: make(chan term.RevokeReason, 16)}
}

func (r *claimRec) Won(t *term.Term)                            { r.won <- t }
func (r *claimRec) Lost(_ *term.Term, reason term.RevokeReason) { r.lost <- reason }
func (r *claimRec) Closed()                                     {}

func (r *claimRec) awaitWon(t *testing.T, within time.Duration) *term.Term {
	t.Helper()
	select {
	case tm := <-r.won:
		return tm
	case <-time.After(within):
		t.Fatalf("no term won within %v", within)
		return nil
	}
}

func (r *claimRec) awaitLost(t *testing.T, within time.Duration) term.RevokeReason {
	t.Helper()
	select {
	case reason := <-r.lost:
		return reason
	case <-time.After(within):
		t.Fatalf("no term lost within %v", within)
		return 0
	}
}

// events collects a session's events.
type events chan session.Event

func (ch events) listener(e session.Event) {
	select {
	case ch <- e:
	default:
	}
}

func (ch events) await(t *testing.T, kind session.EventKind, within time.Duration) session.Event {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e := <-ch:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event within %v", kind, within)
			return session.Event{}
		}
	}
}

// startEngine opens a session on b with cfg and claims name.
func startEngine(t *testing.T, b driver.Backend, cfg deadline.Config, name string) (*session.Session, *claimRec, events) {
	t.Helper()
	ev := make(events, 4096)
	s, err := session.Open(ctxT(t), b, session.WithConfig(cfg), session.WithListener(ev.listener), session.WithLogger(nil))
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := newClaimRec()
	c, err := layer.MustOf(s).Claim(name, rec)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	return s, rec, ev
}

func TestEngineRedisPaused(t *testing.T) {
	srv := startServer(t)
	ns := namespace(t)
	ob := &observed{Backend: newBackend(t, srv.client(srv.addr()), ns)}
	ob.failClose.Store(true)
	cfg := deadline.Config{LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond}
	_, rec, ev := startEngine(t, ob, cfg, "x")
	tm := rec.awaitWon(t, 5*time.Second)

	srv.pause()
	pausedAt := time.Now()
	// The renewal in flight (or the next one) times out after the renewal
	// period, through the call's context that go-redis must honour: SUSPENDED
	// about two periods after the pause, and in any case before the term's
	// local deadline (checked below, once the deadline is known). The exact
	// latency is the session tests' (virtual time): here a stalled test
	// process delays it by the stall, which is no fault of the code.
	susp := ev.await(t, session.SessionSuspended, 3*time.Second)
	t.Logf("SUSPENDED %v after the pause (two renewal periods: %v)", susp.Time.Sub(pausedAt), 2*cfg.RenewInterval)
	if reason := rec.awaitLost(t, 3*time.Second); reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v, want DEADLINE_PASSED", reason)
	}
	if tm.Valid() {
		t.Error("term still valid after DEADLINE_PASSED")
	}
	// The term's end as the engine records it: its local deadline, past
	// which it was never valid. The time this goroutine hears of the end
	// comes later by however long the engine and the scheduler took, which
	// on a loaded machine can exceed the margin (Drift and Margin: about
	// 70 ms here) and is no part of the promise.
	rev := ev.await(t, session.TermRevoked, 3*time.Second)
	if rev.Name != "x" || rev.Token != tm.Token() || rev.Reason != term.DeadlinePassed || rev.Deadline.IsZero() {
		t.Fatalf("TermRevoked %+v, want x's term %d ended with DEADLINE_PASSED at its deadline", rev, tm.Token())
	}
	if susp.Time.After(rev.Deadline) {
		// A call that hung past the renewal period (a context not honoured,
		// go-redis's own 3 s read timeout instead) suspends only after the
		// 2 s lease's deadline.
		t.Errorf("SUSPENDED %v after the term's local deadline, want before it", susp.Time.Sub(rev.Deadline))
	}
	free := ob.redisFreesAfter()
	if !rev.Deadline.Before(free) {
		t.Fatalf("the term's local deadline is %v after Redis could free the lease", rev.Deadline.Sub(free))
	}
	t.Logf("the term's local deadline was %v before Redis could free the lease (noticed %v after the deadline)", free.Sub(rev.Deadline), rev.Time.Sub(rev.Deadline))

	srv.resume()
	// Right after Redis wakes, the lease is still held there: nobody else
	// may have it yet, although the node has stopped believing it owns it.
	other := newBackend(t, srv.client(srv.addr()), ns)
	oid := open(t, other, 10*time.Second)
	sent := time.Now()
	tok := acquire(t, other, oid, "x")[0]
	if sent.Before(free) && tok != 0 {
		t.Fatalf("another session took x (token %d) before Redis's expiry of the owner", tok)
	}
	if tok != 0 && tok <= tm.Token() {
		t.Fatalf("token %d after the pause, want > %d", tok, tm.Token())
	}
	if tok != 0 {
		release(t, other, oid, "x", tok)
	}
	if err := other.Close(ctxT(t), oid); err != nil {
		t.Fatal(err)
	}
	// Once Redis frees the lease, the engine's new session wins a new term
	// with a higher token.
	next := rec.awaitWon(t, 3*cfg.LeaseDuration)
	if next.Token() <= tm.Token() {
		t.Fatalf("next term's token %d, want > %d", next.Token(), tm.Token())
	}
}

// TestEngineRedisRestartedEmpty is issue 10's case: two processes contend
// for x, and Redis restarts without its data while one of them leads. The
// quarantine (ADR 0130) holds every grant back until the old leader's
// belief has ended: no new term before the last successful renewal's send
// time plus the remaining time Redis gave it, a bound on the old term's
// local deadline. Without the quarantine the other process won at once,
// while the old leader still believed in its term for up to one lease.
func TestEngineRedisRestartedEmpty(t *testing.T) {
	srv := startServer(t)
	ns := namespace(t)
	cfg := deadline.Config{LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond}
	capped := redissimba.WithMaxLease(cfg.LeaseDuration)
	a := &observed{Backend: newBackend(t, srv.client(srv.addr()), ns, capped)}
	sa, recA, evA := startEngine(t, a, cfg, "x")
	tm := recA.awaitWon(t, 5*time.Second)
	_, recB, evB := startEngine(t, newBackend(t, srv.client(srv.addr()), ns, capped), cfg, "x")
	before := sa.ID()

	srv.restartEmpty()
	restarted := time.Now()
	if reason := recA.awaitLost(t, 3*time.Second); reason != term.SessionExpired && reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v after the restart, want SESSION_EXPIRED", reason)
	}
	believedUntil := a.redisFreesAfter() // the old term's deadline is before this
	var next *term.Term
	select {
	case next = <-recA.won:
	case next = <-recB.won:
	case <-time.After(time.Until(restarted) + 3*cfg.LeaseDuration):
		t.Fatal("no new term within three leases of the restart")
	}
	wonAt := time.Now()
	if !wonAt.After(believedUntil) {
		t.Fatalf("new term (token %d) won %v before the old leader's belief could end: two leaders", next.Token(), believedUntil.Sub(wonAt))
	}
	t.Logf("new term %v after the restart, %v after the old belief's bound", wonAt.Sub(restarted), wonAt.Sub(believedUntil))
	if next.Token() <= tm.Token() {
		t.Fatalf("token after the restart without data = %d, want > %d", next.Token(), tm.Token())
	}
	if sa.ID() == before {
		t.Fatalf("session id %s reused after the data loss", before)
	}
	quarantined := func(ev events) bool {
		for {
			select {
			case e := <-ev:
				if e.Kind == session.BackendQuarantined {
					if !errors.Is(e.Err, session.ErrQuarantined) || e.Remaining <= 0 || e.Remaining > cfg.LeaseDuration {
						t.Errorf("BackendQuarantined %+v: want Err wrapping ErrQuarantined, Remaining in (0, %v]", e, cfg.LeaseDuration)
					}
					return true
				}
			default:
				return false
			}
		}
	}
	if qa, qb := quarantined(evA), quarantined(evB); !qa && !qb {
		t.Error("no BackendQuarantined event from either session")
	}
}

func TestEngineConnectionCutWhileSuspended(t *testing.T) {
	srv := startServer(t)
	p := startProxy(t, srv.addr())
	b := newBackend(t, srv.client(p.addr()), namespace(t))
	cfg := deadline.Config{LeaseDuration: 3 * time.Second, RenewInterval: time.Second}
	s, rec, ev := startEngine(t, b, cfg, "x")
	tm := rec.awaitWon(t, 5*time.Second)
	id := s.ID()

	p.setCut(true)
	ev.await(t, session.SessionSuspended, 3*cfg.RenewInterval)
	p.setCut(false)
	// Restored before the deadline: the same session goes on, its term
	// never ended.
	for {
		e := ev.await(t, session.SessionRenewed, 2*cfg.RenewInterval)
		if e.State == session.Live {
			break
		}
	}
	if s.ID() != id {
		t.Fatalf("session %s replaced by %s, want the same session to go on", id, s.ID())
	}
	if !tm.Valid() {
		t.Fatalf("term ended (%v) although the session survived", tm.Reason())
	}
	select {
	case reason := <-rec.lost:
		t.Fatalf("term lost with %v during a short cut", reason)
	default:
	}
}
