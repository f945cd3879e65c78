package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every test here runs in a synctest bubble: time is virtual and moves only
// when every goroutine of the test is blocked, so the engine's real code
// path (SystemEnv, time.AfterFunc, goroutines) runs deterministically and
// instantly.

// advance lets d of virtual time pass and waits until the engine is idle.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// recorder is a ClaimHandler that records what happens.
type recorder struct {
	mu     sync.Mutex
	won    []*term.Term
	lost   []lostTerm
	closed bool
	refuse []error
}

type lostTerm struct {
	t      *term.Term
	reason term.RevokeReason
}

func (r *recorder) Won(t *term.Term) { r.mu.Lock(); r.won = append(r.won, t); r.mu.Unlock() }
func (r *recorder) Lost(t *term.Term, reason term.RevokeReason) {
	r.mu.Lock()
	r.lost = append(r.lost, lostTerm{t, reason})
	r.mu.Unlock()
}
func (r *recorder) Closed()           { r.mu.Lock(); r.closed = true; r.mu.Unlock() }
func (r *recorder) Refused(err error) { r.mu.Lock(); r.refuse = append(r.refuse, err); r.mu.Unlock() }

func (r *recorder) terms() []*term.Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*term.Term(nil), r.won...)
}

func (r *recorder) losses() []lostTerm {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lostTerm(nil), r.lost...)
}

// events records a session's events.
type events struct {
	mu  sync.Mutex
	all []session.Event
}

func (e *events) listen(ev session.Event) { e.mu.Lock(); e.all = append(e.all, ev); e.mu.Unlock() }

func (e *events) count(k session.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func (e *events) last(k session.EventKind) (session.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.all) - 1; i >= 0; i-- {
		if e.all[i].Kind == k {
			return e.all[i], true
		}
	}
	return session.Event{}, false
}

type fixture struct {
	t   *testing.T
	b   *memory.Backend
	s   *session.Session
	ev  *events
	cfg deadline.Config
}

func newFixture(t *testing.T, cfg deadline.Config, bopts ...memory.Option) *fixture {
	t.Helper()
	b, err := memory.New(bopts...)
	if err != nil {
		t.Fatal(err)
	}
	return openOn(t, b, cfg)
}

func openOn(t *testing.T, b *memory.Backend, cfg deadline.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, b: b, ev: &events{}, cfg: cfg.WithDefaults()}
	s, err := session.Open(context.Background(), b, session.WithConfig(cfg), session.WithListener(f.ev.listen), session.WithLogger(nil))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	f.s = s
	synctest.Wait() // events are delivered after Open returns
	t.Cleanup(func() { _ = s.Close() })
	return f
}

// openDecorated opens a session on a decorated backend (one that changes
// the memory backend's answers), closed when the test ends.
func openDecorated(t *testing.T, b session.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (f *fixture) claim(name string) (layer.Claim, *recorder) {
	f.t.Helper()
	r := &recorder{}
	c, err := layer.MustOf(f.s).Claim(name, r)
	if err != nil {
		f.t.Fatalf("Claim(%q): %v", name, err)
	}
	layer.MustOf(f.s).Do(func() { c.Want(true) })
	synctest.Wait()
	return c, r
}

func TestOpenIsLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		if got := f.s.State(); got != session.Live {
			t.Fatalf("State() = %v, want LIVE", got)
		}
		if f.s.ID() == "" {
			t.Fatal("ID() is empty after Open")
		}
		// A fresh grant of 15s on a reply with no delay: deadline = sentAt + 15s × 0.99 − 50ms.
		if got, want := f.s.Remaining(), 14800*time.Millisecond; got != want {
			t.Fatalf("Remaining() = %v, want %v", got, want)
		}
		if f.ev.count(session.SessionOpened) != 1 {
			t.Fatalf("SessionOpened events = %d, want 1", f.ev.count(session.SessionOpened))
		}
	})
}

func TestRenewalIsOneCallWhateverTheLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		var recs []*recorder
		for i := range 200 {
			_, r := f.claim(fmt.Sprintf("lease-%d", i))
			recs = append(recs, r)
		}
		for i, r := range recs {
			if len(r.terms()) != 1 {
				t.Fatalf("claim %d: %d terms, want 1", i, len(r.terms()))
			}
		}
		before := f.b.Stats().Renew
		advance(5*time.Second*10 + time.Millisecond)
		if got := f.b.Stats().Renew - before; got != 10 {
			t.Fatalf("renewals in 10 periods with 200 leases = %d, want 10", got)
		}
		for i, r := range recs {
			if !r.terms()[0].Valid() {
				t.Fatalf("term %d no longer valid after renewals", i)
			}
		}
	})
}

func TestAcquisitionsAreBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		other := openOn(t, f.b.NewClient(), deadline.Config{})
		const n = 1000
		var theirs, ours []layer.Claim
		for i := range n {
			name := fmt.Sprintf("job-%d", i)
			c, err := layer.MustOf(other.s).Claim(name, &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			theirs = append(theirs, c)
			c, err = layer.MustOf(f.s).Claim(name, &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			ours = append(ours, c)
		}
		want := func(s *session.Session, cs []layer.Claim) {
			layer.MustOf(s).Do(func() {
				for _, c := range cs {
					c.Want(true)
				}
			})
			synctest.Wait()
		}
		// The other session takes all 1,000 in at most two calls (the first
		// Want sends at once, the rest queue behind it).
		want(other.s, theirs)
		if got := other.b.Stats().Acquire; got > 2 {
			t.Fatalf("Acquire calls to take %d leases = %d, want at most 2", n, got)
		}
		// Now our 1,000 candidates compete: one call per candidate tick.
		want(f.s, ours)
		before := f.b.Stats().Acquire
		advance(time.Minute)
		ticks := f.b.Stats().Acquire - before
		// Candidate ticks come every 2.5–5s: 12 to 24 in a minute, each one call.
		if ticks < 12 || ticks > 24 {
			t.Fatalf("Acquire calls in a minute of 1,000 waiting candidates = %d, want one per tick (12–24)", ticks)
		}
	})
}

func TestFailedRenewalSuspendsWithHalvingBackoffUntilDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("jobs")
		tm := r.terms()[0]
		f.b.FailCalls(errors.New("connection refused"))
		start := f.b.Stats().Renew
		// t=5s: the renewal fails at once; deadline at 14.8s, so 9.8s left:
		// retries after min(4.9s, 5s), then half of what is left each time.
		advance(5*time.Second + time.Millisecond)
		if got := f.s.State(); got != session.Suspended {
			t.Fatalf("State() after a failed renewal = %v, want SUSPENDED", got)
		}
		if !tm.Valid() {
			t.Fatal("term not valid while SUSPENDED before the deadline")
		}
		ev, _ := f.ev.last(session.SessionSuspended)
		if ev.Err == nil {
			t.Fatal("SessionSuspended event carries no error")
		}
		// Retries at 9.9s, 12.35s, 13.575s, 14.1875s, 14.49375s, 14.646875s,
		// 14.7234375s (then 0.0766s left: the 0.1s floor would pass the
		// deadline, so no more).
		advance(9798 * time.Millisecond) // to 14.799s
		if got := f.b.Stats().Renew - start; got != 8 {
			t.Fatalf("renewal attempts before the deadline = %d, want 8 (1 + 7 halving retries)", got)
		}
		if !tm.Valid() {
			t.Fatal("term ended before the local deadline")
		}
		advance(2 * time.Millisecond)
		if tm.Valid() || tm.Reason() != term.DeadlinePassed {
			t.Fatalf("after the deadline: Valid %v Reason %v, want false DEADLINE_PASSED", tm.Valid(), tm.Reason())
		}
		if l := r.losses(); len(l) != 1 || l[0].reason != term.DeadlinePassed {
			t.Fatalf("Lost calls = %v, want one DEADLINE_PASSED", l)
		}
		if f.ev.count(session.SessionDeadlinePassed) != 1 {
			t.Fatal("no SessionDeadlinePassed event")
		}
		// Event.State is the state after the event: the deadline ended the
		// backend session, and a new one is being opened.
		if ev, _ := f.ev.last(session.SessionDeadlinePassed); ev.State != session.Opening {
			t.Fatalf("SessionDeadlinePassed.State = %v, want OPENING", ev.State)
		}
		if ev, _ := f.ev.last(session.TermRevoked); ev.Reason != term.DeadlinePassed || ev.State != session.Opening {
			t.Fatalf("TermRevoked (%v).State = %v, want DEADLINE_PASSED in OPENING", ev.Reason, ev.State)
		}
		if got := f.s.State(); got != session.Opening {
			t.Fatalf("State() after the deadline = %v, want OPENING", got)
		}
	})
}

func TestCallTimesOutAfterTheRenewalPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		f.b.Pause()
		defer f.b.Resume()
		advance(5*time.Second + time.Millisecond) // renewal sent at 5s, stuck
		if got := f.s.State(); got != session.Live {
			t.Fatalf("State() while the call is in flight = %v, want LIVE", got)
		}
		advance(5 * time.Second) // 10.001s: the call timed out after 5s
		if got := f.s.State(); got != session.Suspended {
			t.Fatalf("State() after the renewal period = %v, want SUSPENDED", got)
		}
		ev, _ := f.ev.last(session.SessionSuspended)
		if !errors.Is(ev.Err, context.DeadlineExceeded) {
			t.Fatalf("SessionSuspended.Err = %v, want DeadlineExceeded", ev.Err)
		}
	})
}

func TestLateReplyNeverExtendsAPassedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("jobs")
		tm := r.terms()[0]
		old := f.s.ID()
		// Every reply now takes 20s: each renewal times out, and its reply
		// (a success, the session is alive on the backend) comes after the
		// local deadline.
		f.b.SetReplyDelay(20 * time.Second)
		advance(15 * time.Second)
		if tm.Valid() {
			t.Fatal("term valid after its local deadline")
		}
		f.b.SetReplyDelay(0)
		advance(30 * time.Second) // late replies arrive; a new session opens
		if tm.Valid() || tm.Reason() != term.DeadlinePassed {
			t.Fatalf("old term: Valid %v Reason %v, want false DEADLINE_PASSED forever", tm.Valid(), tm.Reason())
		}
		if f.s.ID() == old || f.s.ID() == "" {
			t.Fatalf("ID() = %q, want a new session id (old %q)", f.s.ID(), old)
		}
		// The claim competes again, under the new session.
		if ts := r.terms(); len(ts) != 2 || ts[1].Token() <= ts[0].Token() {
			t.Fatalf("terms after reopening: %d, want 2 with a higher token", len(ts))
		}
	})
}

func TestExpiredSessionIsNeverRevived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("jobs")
		old := f.s.ID()
		f.b.Expire(old)
		advance(5*time.Second + time.Millisecond)
		ls := r.losses()
		if len(ls) != 1 || ls[0].reason != term.SessionExpired || ls[0].t.Reason() != term.SessionExpired {
			t.Fatalf("losses = %v, want one SESSION_EXPIRED", ls)
		}
		if f.ev.count(session.SessionExpired) != 1 || f.ev.count(session.SessionOpened) != 2 {
			t.Fatalf("events: expired %d opened %d, want 1 and 2", f.ev.count(session.SessionExpired), f.ev.count(session.SessionOpened))
		}
		if ev, _ := f.ev.last(session.SessionExpired); ev.State != session.Opening {
			t.Fatalf("SessionExpired.State = %v, want OPENING (the state after the event)", ev.State)
		}
		if id := f.s.ID(); id == old || id == "" {
			t.Fatalf("ID() = %q after expiry, want a new id (old %q)", id, old)
		}
		if _, ok := f.b.Remaining(old); ok {
			t.Fatal("the old session is alive on the backend again")
		}
		if ts := r.terms(); len(ts) != 2 || ts[1].Token() <= ts[0].Token() || !ts[1].Valid() || ts[0].Valid() {
			t.Fatalf("want the old term ended and a new valid term with a higher token; got %d terms", len(ts))
		}
	})
}

// dropLease is a Backend decorator whose renewal replies stop listing one
// lease, as when another session took it over.
type dropLease struct {
	session.Backend
	mu   sync.Mutex
	drop string
}

func (d *dropLease) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := d.Backend.Renew(ctx, driver.RenewRequest{ID: req.ID})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drop != "" {
		kept := r.Leases[:0]
		for _, l := range r.Leases {
			if l.Name != d.drop {
				kept = append(kept, l)
			}
		}
		r.Leases, r.Version = kept, r.Version+1000
	}
	return r, err
}

func TestRenewalThatNoLongerListsALeaseEndsItsTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &dropLease{Backend: b}
		s := openDecorated(t, d)
		ra, rb := &recorder{}, &recorder{}
		ca, _ := layer.MustOf(s).Claim("a", ra)
		cb, _ := layer.MustOf(s).Claim("b", rb)
		layer.MustOf(s).Do(func() { ca.Want(true); cb.Want(true) })
		synctest.Wait()
		d.mu.Lock()
		d.drop = "a"
		d.mu.Unlock()
		advance(5*time.Second + time.Millisecond)
		if l := ra.losses(); len(l) != 1 || l[0].reason != term.TakenOver {
			t.Fatalf("a: losses %v, want one TAKEN_OVER", l)
		}
		if len(rb.losses()) != 0 || !rb.terms()[0].Valid() {
			t.Fatal("b lost its term though the reply still lists it")
		}
	})
}

func TestShortenedGrantRenewsEveryThirdOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A ZooKeeper-like backend: 5/12 of the session timeout.
		f := newFixture(t, deadline.Config{}, memory.WithGrantFraction(5, 12))
		// 15s × 5/12 = 6.25s; validity 6.1375s; renew every 2.045833333s.
		snap := f.s.Snapshot()
		if want := session.Duration(2045833333); snap.RenewEvery != want {
			t.Fatalf("RenewEvery = %v, want %v", time.Duration(snap.RenewEvery), time.Duration(want))
		}
		_, r := f.claim("jobs")
		before := f.b.Stats().Renew
		advance(time.Minute)
		if got := f.b.Stats().Renew - before; got < 29 || got > 30 {
			t.Fatalf("renewals in a minute = %d, want 29 (every ≈2.046s)", got)
		}
		if !r.terms()[0].Valid() || len(r.losses()) != 0 {
			t.Fatal("term ended although renewals kept up with the shortened grant")
		}
		if got := f.ev.count(session.SessionLeaseShortened); got != 1 {
			t.Fatalf("SessionLeaseShortened events = %d, want exactly 1 per session", got)
		}
		// A new session publishes it once again.
		f.b.Expire(f.s.ID())
		advance(3 * time.Second)
		if got := f.ev.count(session.SessionLeaseShortened); got != 2 {
			t.Fatalf("SessionLeaseShortened events after a new session = %d, want 2", got)
		}
	})
}

// nominal reports the backend's own grant rule in OpenReply.Nominal, as
// the ZooKeeper backend does (5/12 of the lease asked for).
type nominal struct {
	*memory.Backend
	num, den int64
}

func (n nominal) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	r, err := n.Backend.Open(ctx, req)
	r.Nominal = req.LeaseDuration * time.Duration(n.num) / time.Duration(n.den)
	return r, err
}

// A grant that is exactly the backend's own rule (ZooKeeper's 5/12) is no
// warning: the session renews as often as it needs to, silently. A grant
// below the rule (a server clamping the timeout) still warns, once.
func TestNominalGrantIsNoWarning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxLease time.Duration
		nominal  int64 // numerator over 12 the decorator reports
		warns    int
	}{
		{"grant as the rule says", 0, 5, 0},
		{"server clamped below the rule", 6 * time.Second, 5, 1},
		{"no rule reported", 0, 0, 1},
		{"a nonsense rule is ignored", 0, 13, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []memory.Option{memory.WithGrantFraction(5, 12)}
				if tc.maxLease > 0 {
					opts = append(opts, memory.WithMaxLease(tc.maxLease))
				}
				mb, err := memory.New(opts...)
				if err != nil {
					t.Fatal(err)
				}
				ev := &events{}
				s, err := session.Open(context.Background(), nominal{mb, tc.nominal, 12}, session.WithListener(ev.listen), session.WithLogger(nil))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				advance(time.Minute)
				if got := ev.count(session.SessionLeaseShortened); got != tc.warns {
					t.Fatalf("SessionLeaseShortened events = %d, want %d", got, tc.warns)
				}
				// Either way the session renews every third of the grant's
				// validity and stays live.
				if every := time.Duration(s.Snapshot().RenewEvery); every >= 15*time.Second*3/10 {
					t.Fatalf("RenewEvery = %v, want the shortened period", every)
				}
				if s.State() != session.Live {
					t.Fatalf("state %v after a minute, want LIVE", s.State())
				}
			})
		})
	}
}

func TestMaxLeaseCapIsShortenedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// maxSessionTimeout 6s, 5/12: 2.5s granted, validity 2.425s, every ≈0.808s.
		f := newFixture(t, deadline.Config{}, memory.WithMaxLease(6*time.Second), memory.WithGrantFraction(5, 12))
		if got, want := time.Duration(f.s.Snapshot().RenewEvery), time.Duration(808333333); got != want {
			t.Fatalf("RenewEvery = %v, want %v", got, want)
		}
	})
}

func TestCloseReleasesEveryLeaseAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		var recs []*recorder
		for _, n := range []string{"a", "b", "c"} {
			_, r := f.claim(n)
			recs = append(recs, r)
		}
		if err := f.s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for i, r := range recs {
			tm := r.terms()[0]
			if tm.Valid() || tm.Reason() != term.Stopped {
				t.Fatalf("term %d after Close: Valid %v Reason %v, want false STOPPED", i, tm.Valid(), tm.Reason())
			}
			if !r.closed {
				t.Fatalf("claim %d not told the session closed", i)
			}
		}
		for _, n := range []string{"a", "b", "c"} {
			if _, _, ok := f.b.Owner(n); ok {
				t.Fatalf("%s still owned on the backend after Close", n)
			}
		}
		if f.s.State() != session.Closed || f.ev.count(session.SessionClosed) != 1 {
			t.Fatal("not CLOSED, or no SessionClosed event")
		}
		if _, err := layer.MustOf(f.s).Claim("d", &recorder{}); !errors.Is(err, session.ErrClosed) {
			t.Fatalf("Claim after Close = %v, want ErrClosed", err)
		}
		if err := f.s.Close(); err != nil {
			t.Fatalf("second Close = %v, want nil", err)
		}
	})
}

func TestReplyDelayOnlyShortensTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		f.b.SetReplyDelay(time.Second)
		advance(5*time.Second + time.Second + time.Millisecond) // renewal sent at 5s, answered at 6s
		// deadline = 5s + 14.8s = 19.8s; now 6.001s.
		if got, want := f.s.Remaining(), 13799*time.Millisecond; got != want {
			t.Fatalf("Remaining() = %v, want %v (counted from the send)", got, want)
		}
	})
}

func TestNoticeTriggersAnAttemptAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		g := openOn(t, f.b.NewClient(), deadline.Config{})
		ca, ra := f.claim("jobs")
		_, rb := g.claim("jobs")
		if len(ra.terms()) != 1 || len(rb.terms()) != 0 {
			t.Fatal("want a to lead and b to wait")
		}
		layer.MustOf(f.s).Do(func() { ca.Want(false); ca.Release(term.Stopped, nil) })
		synctest.Wait() // no time passes: the notice, not a tick, wakes b
		if len(rb.terms()) != 1 || !rb.terms()[0].Valid() {
			t.Fatal("b did not take over at once on the release notice")
		}
		if rb.terms()[0].Token() <= ra.terms()[0].Token() {
			t.Fatal("b's token is not higher than a's")
		}
	})
}

// slowAcquire delays every Acquire reply past the engine's timeout.
type slowAcquire struct {
	*memory.Backend
	delay time.Duration
}

func (s *slowAcquire) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := s.Backend.Acquire(context.Background(), req)
	<-time.After(s.delay) // the reply travels slowly; the engine gave up already
	return r, err
}

func TestLateReplyToAnAbandonedAttemptIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		slow := &slowAcquire{Backend: b, delay: 6 * time.Second}
		s := openDecorated(t, slow)
		r := &recorder{}
		c, _ := layer.MustOf(s).Claim("jobs", r)
		layer.MustOf(s).Do(func() { c.Want(true) })
		advance(5*time.Second + time.Millisecond) // the attempt timed out
		layer.MustOf(s).Do(func() { c.Want(false) })
		advance(10 * time.Second) // every late reply has arrived
		if len(r.terms()) != 0 {
			t.Fatal("a reply that came after the attempt timed out became a term")
		}
		if len(r.refuse) == 0 || !errors.Is(r.refuse[0], context.DeadlineExceeded) {
			t.Fatalf("Refused = %v, want the timeout", r.refuse)
		}
		if id, tok, ok := b.Owner("jobs"); ok {
			t.Fatalf("the lease won by a late reply was not released: owned by %s under %d", id, tok)
		}
	})
}

func TestClaimErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		if _, err := layer.MustOf(f.s).Claim("a/b", &recorder{}); !errors.Is(err, deadline.ErrInvalidName) {
			t.Fatalf("Claim(a/b) = %v, want ErrInvalidName", err)
		}
		f.claim("jobs")
		if _, err := layer.MustOf(f.s).Claim("jobs", &recorder{}); !errors.Is(err, session.ErrAlreadyStarted) {
			t.Fatalf("second Claim(jobs) = %v, want ErrAlreadyStarted", err)
		}
	})
}

func TestSnapshotIsJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		f.claim("jobs")
		b, err := json.Marshal(f.s.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back["state"] != "LIVE" || back["renew_every"] != "5s" || back["id"] != string(f.s.ID()) {
			t.Fatalf("snapshot JSON = %s", b)
		}
		entries := back["entries"].([]any)
		e := entries[0].(map[string]any)
		if len(entries) != 1 || e["name"] != "jobs" || e["valid"] != true || e["token"] == nil {
			t.Fatalf("snapshot entries = %v", entries)
		}
	})
}

func TestInvalidConfigIsRefused(t *testing.T) {
	b, _ := memory.New()
	_, err := session.New(b, session.WithConfig(deadline.Config{LeaseDuration: 15 * time.Second, RenewInterval: 8 * time.Second}))
	if !errors.Is(err, deadline.ErrInvalidConfig) {
		t.Fatalf("New with renew 8s of 15s = %v, want ErrInvalidConfig", err)
	}
	if _, err := session.New(nil); err == nil {
		t.Fatal("New(nil) = nil error")
	}
}

// staleToken answers an acquisition with the token this session last
// released, as a confused backend (or a replayed reply) might.
type staleToken struct {
	*memory.Backend
	mu    sync.Mutex
	stale uint64
}

func (b *staleToken) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	b.mu.Lock()
	stale := b.stale
	b.mu.Unlock()
	if stale == 0 {
		return b.Backend.Acquire(ctx, req)
	}
	r := driver.AcquireReply{}
	for _, n := range req.Names {
		r.Results = append(r.Results, driver.AcquireResult{Name: n, Token: stale})
	}
	return r, nil
}

func TestTokenNotAboveAReleasedOneIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		sb := &staleToken{Backend: b}
		s := openDecorated(t, sb)
		r := &recorder{}
		c, _ := layer.MustOf(s).Claim("jobs", r)
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		first := r.terms()[0]
		layer.MustOf(s).Do(func() { c.Want(false); c.Release(term.Stopped, nil) })
		synctest.Wait()
		sb.mu.Lock()
		sb.stale = first.Token()
		sb.mu.Unlock()
		layer.MustOf(s).Do(func() { c.Want(true) })
		advance(time.Minute) // many candidate ticks, each answered with the released token
		if n := len(r.terms()); n != 1 {
			t.Fatalf("%d terms; a token not above one this session released became a term", n)
		}
	})
}

// A leader task that reacts to its term's end by closing the session (a
// common "shut down when we lose leadership" pattern) runs while another
// goroutine's Close waits for that very task: its Close must not wait.
func TestCloseFromATaskWhileAnotherCloseWaitsDoesNotDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("jobs")
		tm := r.terms()[0]
		inner := make(chan error, 1)
		layer.MustOf(f.s).Go(nil, func() {
			<-tm.Done()
			inner <- f.s.Close()
		})
		outer := make(chan error, 1)
		go func() { outer <- f.s.Close() }()
		select {
		case err := <-outer:
			if err != nil {
				t.Fatalf("Close = %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Close hangs: it waits for a task that waits for Close")
		}
		if err := <-inner; !errors.Is(err, session.ErrWouldBlockSelf) {
			t.Fatalf("Close from the task = %v, want ErrWouldBlockSelf", err)
		}
	})
}

// Close while OPENING between failed attempts must not wait for the next
// attempt's backoff timer: Close ends the session at once.
func TestCloseWhileOpeningBetweenAttemptsDoesNotWaitForTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		b.FailCalls(errors.New("backend down"))
		ev := &events{}
		s, err := session.New(b, session.WithListener(ev.listen), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		advance(10 * time.Second) // several failed opens: the backoff has grown to the renewal period
		if s.State() != session.Opening || ev.count(session.SessionSuspended) < 5 {
			t.Fatalf("state %v after %d failed opens, want OPENING after at least 5", s.State(), ev.count(session.SessionSuspended))
		}
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Close waited %v for the next open attempt's backoff, want 0", waited)
		}
	})
}

// Open whose ctx ends before the backend answers returns ctx's cause,
// wrapped, and leaves nothing running (goleak checks the rest).
func TestOpenWhoseContextEndsClosesTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		b.Pause() // the backend does not answer
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		s, err := session.Open(ctx, b, session.WithLogger(nil))
		if s != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Open past ctx = %v, %v; want nil, DeadlineExceeded", s, err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("Open returned after %v, want when ctx ended (1s)", waited)
		}
		b.Resume()
		synctest.Wait()
		if st := b.Stats(); st.Open != 1 || st.Renew != 0 || st.Acquire != 0 {
			t.Fatalf("backend calls after the abandoned Open: %+v, want the one Open only", st)
		}
	})
}

// Close while calls are in flight (a renewal and an acquisition stuck on a
// backend that stopped answering) does not wait for them: its own close
// call times out after one renewal period, like every backend call, the
// calls in flight are cancelled, no term is made from them, and the claim
// learns it is over.
func TestCloseWithCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		f.b.Pause()
		advance(5*time.Second + time.Millisecond) // a renewal is now in flight
		r := &recorder{}
		c, err := layer.MustOf(f.s).Claim("jobs", r)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(f.s).Do(func() { c.Want(true) }) // and an acquisition
		synctest.Wait()
		if st := f.b.Stats(); st.Renew != 1 || st.Acquire != 1 {
			t.Fatalf("calls in flight: %+v, want one renewal and one acquisition", st)
		}
		start := time.Now()
		if err := f.s.Close(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close on a backend that does not answer = %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != f.cfg.RenewInterval {
			t.Fatalf("Close waited %v, want one renewal period (%v)", waited, f.cfg.RenewInterval)
		}
		f.b.Resume()
		synctest.Wait()
		if len(r.terms()) != 0 || !r.closed || f.s.State() != session.Closed {
			t.Fatalf("after Close: %d terms, closed %v, state %v", len(r.terms()), r.closed, f.s.State())
		}
	})
}

// lateOpen holds Open replies until released; the session it opens is
// granted on the backend whatever happens to ctx meanwhile, as when a
// reply is already on the wire when the caller gives up.
type lateOpen struct {
	*memory.Backend
	release chan struct{}
	mu      sync.Mutex
	ids     []session.ID
}

func (l *lateOpen) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	r, err := l.Backend.Open(context.Background(), req)
	<-l.release
	l.mu.Lock()
	l.ids = append(l.ids, r.ID)
	l.mu.Unlock()
	return r, err
}

// A backend session granted by an Open reply that comes back while the
// Session is closing is closed on the backend too: Close promises the
// backend session ends at once, not a lease duration later.
func TestCloseWhileOpeningClosesALateGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		l := &lateOpen{Backend: b, release: make(chan struct{})}
		s, err := session.New(l, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the Open is in flight
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		close(l.release) // its reply comes back now, a success
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v", err)
		}
		if len(l.ids) != 1 {
			t.Fatalf("%d sessions opened, want 1", len(l.ids))
		}
		if left, alive := b.Remaining(l.ids[0]); alive {
			t.Fatalf("the session granted during Close is still alive on the backend (%v left)", left)
		}
	})
}
