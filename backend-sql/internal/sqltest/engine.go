package sqltest

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Engine is a dialect for the engine-level failure tests: a real
// session.Session on the backend while the database misbehaves.
type Engine struct {
	// NewTracked returns a backend in a fresh namespace (prefix) on the
	// shared server, and kill, which terminates on the server every
	// connection the backend has open and reports how many.
	NewTracked func(t *testing.T) (b driver.Backend, prefix string, kill func(t *testing.T) int)
	// LockSession is Harness.LockSession on the same server.
	LockSession func(t *testing.T, prefix string, id driver.ID) (unlock func())
	// NewOnRestartable returns a backend in a fresh namespace on the
	// private server that CtlEnv's script stops and starts.
	NewOnRestartable func(t *testing.T) driver.Backend
	// CtlEnv names the variable holding the private server's control
	// script ("<script> stop", "<script> start").
	CtlEnv string
	// NewLossPair returns two clients (two processes' backends) of one
	// fresh namespace on the private server, built with
	// WithMaxLease(maxLease), and wipe, which empties the namespace's
	// tables one statement after the other.
	NewLossPair func(t *testing.T, maxLease time.Duration) (a, b driver.Backend, wipe func(t *testing.T))
}

// RunEngine runs the engine-level failure tests.
func RunEngine(t *testing.T, e Engine) {
	t.Run("ConnectionKilled", func(t *testing.T) { connectionKilled(t, e) })
	t.Run("StatementStalledPastRenewal", func(t *testing.T) { stalled(t, e) })
	t.Run("StatementStalledPastDeadline", func(t *testing.T) { stalledPastDeadline(t, e) })
	t.Run("DatabaseRestarted", func(t *testing.T) { restarted(t, e) })
	t.Run("DataLossUnderTwoEngines", func(t *testing.T) { dataLossTwoEngines(t, e) })
}

// Two engines campaign for one name; the namespace's tables are emptied
// while the first leads. The next term (either engine's: the first one
// campaigns again once its session has expired) begins only after the
// quarantine, when the first term is no longer valid on its holder's
// clock, with a higher token; BackendQuarantined is published (ADR 0130,
// 0135).
func dataLossTwoEngines(t *testing.T, e Engine) {
	const maxLease = 3 * time.Second
	a, b, wipe := e.NewLossPair(t, maxLease)
	_, evA, recA, tmA := leader(t, a, engineCfg, "dl")
	evB := newEventLog()
	sB, err := session.Open(Ctx(t), b, session.WithConfig(engineCfg), session.WithListener(evB.listen), session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sB.Close() })
	recB := newClaimRec()
	c, err := layer.MustOf(sB).Claim("dl", recB)
	if err != nil {
		t.Fatal(err)
	}
	layer.MustOf(sB).Do(func() { c.Want(true) })
	select {
	case tm := <-recB.won:
		t.Fatalf("the second engine won %v while the first led", tm)
	case <-time.After(1500 * time.Millisecond):
	}
	wipe(t)
	lost := time.Now()
	var next *term.Term
	var quarantined *eventLog
	select {
	case next = <-recA.won:
		quarantined = evA
	case next = <-recB.won:
		quarantined = evB
	case <-time.After(30 * time.Second):
		t.Fatal("no new term within 30s of the loss")
	}
	won := time.Since(lost)
	switch {
	case tmA.Valid():
		t.Fatalf("a new term %v began %v after the loss while the first term %v was still valid", next, won, tmA)
	case won < maxLease-100*time.Millisecond:
		t.Fatalf("a new term began %v after the loss, inside the quarantine of %v", won, maxLease)
	case next.Token() <= tmA.Token():
		t.Fatalf("token after the loss %d, want > %d", next.Token(), tmA.Token())
	}
	quarantined.waitFor(t, 0, session.BackendQuarantined, time.Second)
	t.Logf("new term %v after the loss (quarantine %v), token %d > %d", won, maxLease, next.Token(), tmA.Token())
}

// eventLog records a session's events; waits are bounded.
type eventLog struct {
	mu     sync.Mutex
	events []session.Event
	ch     chan struct{}
}

func newEventLog() *eventLog { return &eventLog{ch: make(chan struct{}, 1)} }

func (l *eventLog) listen(e session.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

// mark is the number of events so far: wait from there.
func (l *eventLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// waitFor waits for an event of kind at index from or later and returns
// its index.
func (l *eventLog) waitFor(t *testing.T, from int, kind session.EventKind, within time.Duration) int {
	t.Helper()
	timeout := time.After(within)
	for {
		l.mu.Lock()
		for i := from; i < len(l.events); i++ {
			if l.events[i].Kind == kind {
				l.mu.Unlock()
				return i
			}
		}
		l.mu.Unlock()
		select {
		case <-l.ch:
		case <-timeout:
			t.Fatalf("no %v event within %v; events: %v", kind, within, l.kinds())
		}
	}
}

func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		k := e.Kind.String()
		if e.Err != nil {
			k += "(" + e.Err.Error() + ")"
		}
		out = append(out, k)
	}
	return out
}

// claimRec is a ClaimHandler that records terms won and lost.
type claimRec struct {
	won  chan *term.Term
	lost chan term.RevokeReason
}

func newClaimRec() *claimRec {
	return &claimRec{won: make(chan *term.Term, 16), lost: make(chan term.RevokeReason, 16)}
}

func (r *claimRec) Won(t *term.Term)                         { r.won <- t }
func (r *claimRec) Lost(_ *term.Term, why term.RevokeReason) { r.lost <- why }
func (r *claimRec) Closed()                                  {}

func (r *claimRec) term(t *testing.T, within time.Duration) *term.Term {
	t.Helper()
	select {
	case tm := <-r.won:
		return tm
	case <-time.After(within):
		t.Fatalf("no term won within %v", within)
		return nil
	}
}

// engineCfg: a 3s lease renewed every second keeps the tests short.
var engineCfg = deadline.Config{LeaseDuration: 3 * time.Second, RenewInterval: time.Second}

// leader opens a session on b with cfg, claims name and waits for the term.
func leader(t *testing.T, b driver.Backend, cfg deadline.Config, name string) (*session.Session, *eventLog, *claimRec, *term.Term) {
	t.Helper()
	ev := newEventLog()
	s, err := session.Open(Ctx(t), b, session.WithConfig(cfg), session.WithListener(ev.listen), session.WithLogger(nil))
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := newClaimRec()
	c, err := layer.MustOf(s).Claim(name, rec)
	if err != nil {
		t.Fatal(err)
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	return s, ev, rec, rec.term(t, 10*time.Second)
}

func noLoss(t *testing.T, rec *claimRec, tm *term.Term) {
	t.Helper()
	select {
	case why := <-rec.lost:
		t.Fatalf("term %v lost (%v); want it kept", tm, why)
	default:
	}
	if !tm.Valid() {
		t.Fatalf("term %v no longer valid; want it kept", tm)
	}
}

// Every connection of the backend is killed on the server: the engine's
// next renewal fails or the pool replaces the connection; either way the
// session renews again and the term is kept.
func connectionKilled(t *testing.T, e Engine) {
	b, _, kill := e.NewTracked(t)
	_, ev, rec, tm := leader(t, b, engineCfg, "killed")
	from := ev.mark()
	if n := kill(t); n == 0 {
		t.Fatal("no connection of the backend was found to kill")
	}
	// Two renewals after the kill: the first may fail (SUSPENDED) and back
	// off; the session must be renewed again within the deadline.
	i := ev.waitFor(t, from, session.SessionRenewed, 5*time.Second)
	ev.waitFor(t, i+1, session.SessionRenewed, 5*time.Second)
	noLoss(t, rec, tm)
}

// A renewal stalled on a row lock past the renewal period times out: the
// session is SUSPENDED and backs off; once the lock goes, the renewal
// succeeds and the term is kept.
func stalled(t *testing.T, e Engine) {
	b, prefix, _ := e.NewTracked(t)
	s, ev, rec, tm := leader(t, b, engineCfg, "stalled")
	from := ev.mark()
	unlock := e.LockSession(t, prefix, s.ID())
	ev.waitFor(t, from, session.SessionSuspended, 5*time.Second)
	unlock()
	ev.waitFor(t, from, session.SessionRenewed, 5*time.Second)
	if s.State() != session.Live {
		t.Fatalf("State() = %v after a renewal, want LIVE", s.State())
	}
	noLoss(t, rec, tm)
}

// A stall longer than the local deadline ends the term with
// DEADLINE_PASSED before the database could give the lease away; after
// the stall, the engine opens a new session and wins a new term with a
// higher token.
func stalledPastDeadline(t *testing.T, e Engine) {
	b, prefix, _ := e.NewTracked(t)
	s, ev, rec, tm := leader(t, b, engineCfg, "deadline")
	from := ev.mark()
	unlock := e.LockSession(t, prefix, s.ID())
	ev.waitFor(t, from, session.SessionSuspended, 5*time.Second)
	select {
	case why := <-rec.lost:
		if why != term.DeadlinePassed {
			t.Fatalf("term lost with %v, want DEADLINE_PASSED", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("term not lost within 10s of a stalled renewal")
	}
	if tm.Valid() {
		t.Fatal("term still valid after DEADLINE_PASSED")
	}
	unlock()
	next := rec.term(t, 20*time.Second)
	if next.Token() <= tm.Token() {
		t.Fatalf("new term token %d, want > %d", next.Token(), tm.Token())
	}
}

// The database is stopped for longer than a renewal period and started
// again: the session is SUSPENDED, backs off, and once the database is
// back (with its data: a restart is not data loss) the session renews
// and the term is kept.
func restarted(t *testing.T, e Engine) {
	ctl := os.Getenv(e.CtlEnv)
	if ctl == "" {
		t.Fatalf("%s is not set: the restart test needs the private server that `make services` starts", e.CtlEnv)
	}
	b := e.NewOnRestartable(t)
	cfg := deadline.Config{LeaseDuration: 6 * time.Second, RenewInterval: time.Second}
	_, ev, rec, tm := leader(t, b, cfg, "restarted")
	run := func(arg string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, ctl, arg).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", ctl, arg, err, out)
		}
	}
	from := ev.mark()
	run("stop")
	started := false
	defer func() {
		if !started {
			run("start") // leave the server up for the next test
		}
	}()
	ev.waitFor(t, from, session.SessionSuspended, 5*time.Second)
	run("start")
	started = true
	ev.waitFor(t, from, session.SessionRenewed, 10*time.Second)
	noLoss(t, rec, tm)
}
