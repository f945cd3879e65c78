package session_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// delayed is a claim handler that asks for a lock-delay and, unlike the
// election and the lock, does nothing when it is refused: the engine
// itself must stop the claim.
type delayed struct {
	recorder
	d time.Duration
}

func (h *delayed) LockDelay() time.Duration { return h.d }

// A lock-delay the backend refuses is answered once: the claims that
// asked stop competing (no Acquire at every candidate tick, however the
// layer handles the refusal), and LockDelayRefused says why, once per
// claim (ADR 0240).
func TestRefusedLockDelayStopsTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New(memory.WithMaxLockDelay(time.Second))
		var mu sync.Mutex
		var events []session.Event
		s, err := session.Open(context.Background(), b, session.WithLogger(nil), session.WithListener(func(e session.Event) {
			if e.Kind == session.LockDelayRefused {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		eng := layer.MustOf(s)
		h := &delayed{d: 2 * time.Second}
		c, err := eng.Claim("jobs", h)
		if err != nil {
			t.Fatal(err)
		}
		before := b.Stats().Acquire
		eng.Do(func() { c.Want(true) })
		advance(time.Minute)
		if n := b.Stats().Acquire - before; n != 1 {
			t.Errorf("%d Acquire calls in a minute for a refused lock-delay, want 1", n)
		}
		h.mu.Lock()
		refused := append([]error(nil), h.refuse...)
		h.mu.Unlock()
		if len(refused) != 1 || !errors.Is(refused[0], session.ErrLockDelay) {
			t.Errorf("refusals %v, want one wrapping ErrLockDelay", refused)
		}
		mu.Lock()
		if len(events) != 1 || events[0].Name != "jobs" || events[0].Remaining != 2*time.Second || !errors.Is(events[0].Err, session.ErrLockDelay) {
			var first session.Event
			if len(events) > 0 {
				first = events[0]
			}
			t.Errorf("%d LockDelayRefused events (the first: %+v), want one for jobs, its delay and the error", len(events), first)
		}
		mu.Unlock()
	})
}

// gated records the Acquire requests a session sends and holds each one
// until the test lets it go.
type gated struct {
	*memory.Backend
	mu   sync.Mutex
	reqs [][]string
	hold chan chan struct{} // each Acquire sends its release channel here
}

func (g *gated) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, append([]string{req.LockDelay.String()}, req.Names...))
	g.mu.Unlock()
	release := make(chan struct{})
	g.hold <- release
	<-release
	return g.Backend.Acquire(ctx, req)
}

func (g *gated) requests() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.reqs...)
}

// Claims left behind because their lock-delay differed from the batch's
// go in the next call, even when claims of the batch's delay were queued
// again meanwhile ahead of them: one delay's stream of attempts cannot
// starve another's.
func TestLockDelayLeftBehindGoesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New(memory.WithMaxLockDelay(time.Minute))
		g := &gated{Backend: mb, hold: make(chan chan struct{})}
		s, err := session.New(g, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		eng := layer.MustOf(s)
		claim := func(name string, d time.Duration) layer.Claim {
			c, err := eng.Claim(name, &delayed{d: d})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		gate, a1, a2, b := claim("gate", 0), claim("a1", time.Second), claim("a2", time.Second), claim("b", 2*time.Second)
		eng.Do(func() { gate.Want(true) })
		next := func() chan struct{} {
			select {
			case r := <-g.hold:
				return r
			case <-time.After(time.Minute):
				t.Fatalf("no Acquire within a minute; sent %v", g.requests())
				return nil
			}
		}
		r := next() // [gate] in flight
		eng.Do(func() { a1.Want(true); b.Want(true) })
		close(r)
		r = next() // [a1] in flight, b left behind
		eng.Do(func() { a2.Want(true) })
		close(r)
		close(next()) // b's turn, though a2 comes first in the claims' order
		close(next())
		synctest.Wait()
		want := [][]string{{"0s", "gate"}, {"1s", "a1"}, {"2s", "b"}, {"1s", "a2"}}
		if got := g.requests(); len(got) < len(want) || !equal(got[:len(want)], want) {
			t.Fatalf("Acquire requests (delay, names) %v, want %v", got, want)
		}
	})
}

func equal(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

// renewFails passes every call to its memory backend but the renewals,
// which fail without taking effect while fail is set: a session cut off
// for renewals only, whose local deadline passes while the backend still
// has it.
type renewFails struct {
	*memory.Backend
	mu   sync.Mutex
	fail bool
}

func (r *renewFails) set(fail bool) { r.mu.Lock(); r.fail = fail; r.mu.Unlock() }

func (r *renewFails) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail {
		return driver.RenewReply{}, errors.New("renewals cut off")
	}
	return r.Backend.Renew(ctx, req)
}

// A term whose local deadline passes ends without a release: its holder
// may still be at work (a task that has not seen its context end, a write
// in flight), which is what the lock-delay is for. The engine must not
// Close the backend session it gives up then, since a Close frees every
// name at once, skipping the delay; it lets the session expire, and the
// name stays refused for the delay after that expiry (ADR 0240: "a term
// ends without a release when its session expires on the backend,
// whatever the engine saw first (its deadline passing ...)").
func TestDeadlinePassedKeepsTheLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = time.Minute
		mb, _ := memory.New(memory.WithMaxLockDelay(delay))
		rb := &renewFails{Backend: mb}
		passed := make(chan struct{}, 1)
		s, err := session.Open(context.Background(), rb, session.WithLogger(nil), session.WithListener(func(e session.Event) {
			if e.Kind == session.SessionDeadlinePassed {
				select {
				case passed <- struct{}{}:
				default:
				}
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		eng := layer.MustOf(s)
		h := &delayed{d: delay}
		c, err := eng.Claim("x", h)
		if err != nil {
			t.Fatal(err)
		}
		eng.Do(func() { c.Want(true) })
		synctest.Wait()
		if len(h.terms()) != 1 {
			t.Fatalf("%d terms won, want 1", len(h.terms()))
		}
		holder, _, _ := mb.Owner("x")
		rb.set(true)
		<-passed
		eng.Do(func() { c.Want(false) }) // only the other session competes from now
		synctest.Wait()                  // whatever the engine sends when the deadline passed has landed
		left, live := mb.Remaining(holder)
		if !live {
			t.Fatalf("the backend session ended with the local deadline: it was closed (a Close skips the lock-delay); want it left to expire")
		}
		other := mb.NewClient()
		o, err := other.Open(context.Background(), driver.OpenRequest{LeaseDuration: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// wait lets d pass, the other session renewed meanwhile.
		wait := func(d time.Duration) {
			for d > 0 {
				step := min(d, 5*time.Second)
				advance(step)
				d -= step
				if _, err := other.Renew(context.Background(), driver.RenewRequest{ID: o.ID}); err != nil {
					t.Fatal(err)
				}
			}
		}
		acquire := func() uint64 {
			r, err := other.Acquire(context.Background(), driver.AcquireRequest{ID: o.ID, Names: []string{"x"}})
			if err != nil {
				t.Fatal(err)
			}
			return r.Results[0].Token
		}
		if tok := acquire(); tok != 0 {
			t.Fatalf("x granted (token %d) to another session right after the holder's local deadline passed: want it refused", tok)
		}
		// Within the delay after the backend session's expiry: refused.
		wait(left + delay - time.Second)
		if tok := acquire(); tok != 0 {
			t.Fatalf("x granted (token %d) %v after the holder's session expired, within its lock-delay of %v", tok, delay-time.Second, delay)
		}
		wait(2 * time.Second)
		if tok := acquire(); tok == 0 {
			t.Fatalf("x still refused a second after the lock-delay from the holder's expiry")
		}
	})
}

// With three lock-delays or more, the turn rotates over the delays left
// behind: two delays whose claims are queued again and again, each while
// the other's call is in flight, must not starve a third.
func TestLockDelayTurnsRotate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New(memory.WithMaxLockDelay(time.Minute))
		g := &gated{Backend: mb, hold: make(chan chan struct{})}
		s, err := session.New(g, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		eng := layer.MustOf(s)
		claim := func(name string, d time.Duration) layer.Claim {
			c, err := eng.Claim(name, &delayed{d: d})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		gate := claim("gate", 0)
		var as, bs []layer.Claim
		for _, n := range []string{"a1", "a2", "a3"} {
			as = append(as, claim(n, time.Second))
		}
		for _, n := range []string{"b1", "b2", "b3"} {
			bs = append(bs, claim(n, 2*time.Second))
		}
		c := claim("c", 3*time.Second)
		next := func() chan struct{} {
			select {
			case r := <-g.hold:
				return r
			case <-time.After(time.Minute):
				t.Fatalf("no Acquire within a minute; sent %v", g.requests())
				return nil
			}
		}
		eng.Do(func() { gate.Want(true) })
		r := next() // [gate] in flight
		eng.Do(func() { as[0].Want(true); bs[0].Want(true); c.Want(true) })
		close(r)
		// While each call is in flight, a claim of the other of the two
		// first delays is queued.
		for i := 0; i < 4; i++ {
			r = next()
			eng.Do(func() {
				if i%2 == 0 {
					as[1+i/2].Want(true)
				} else {
					bs[1+i/2].Want(true)
				}
			})
			close(r)
		}
		for drained := false; !drained; {
			select {
			case r := <-g.hold:
				close(r)
			case <-time.After(time.Second):
				drained = true
			}
		}
		got := g.requests()
		for i, req := range got {
			if req[0] == "3s" {
				if i > 3 {
					t.Fatalf("Acquire requests (delay, names) %v: c (3s) went in call %d, want by the 4th: [gate], [1s a1], [2s b1], [3s c]", got, i+1)
				}
				return
			}
		}
		t.Fatalf("Acquire requests (delay, names) %v: c (3s) never sent", got)
	})
}

// jumpEnv is the system Env whose clock the test can move forward at once,
// as a process paused (a GC, a frozen VM) finds on waking, before any of
// its timers has had a chance to run.
type jumpEnv struct {
	session.Env
	mu   sync.Mutex
	skew time.Duration
}

func (j *jumpEnv) Now() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.Env.Now().Add(j.skew)
}

func (j *jumpEnv) jump(d time.Duration) { j.mu.Lock(); j.skew += d; j.mu.Unlock() }

// A Session.Close that comes after the local deadline has passed (the
// process woke from a pause and its shutdown hook ran before the deadline
// timer did) does not turn terms that already ended without a release
// into released ones: it does not close a backend session that asked for
// a lock-delay, so the delay counts from that session's expiry.
func TestCloseAfterTheDeadlineKeepsTheLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = time.Minute
		mb, _ := memory.New(memory.WithMaxLockDelay(delay))
		env := &jumpEnv{Env: session.SystemEnv()}
		s, err := session.Open(context.Background(), mb, session.WithLogger(nil), session.WithEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		eng := layer.MustOf(s)
		h := &delayed{d: delay}
		c, err := eng.Claim("x", h)
		if err != nil {
			t.Fatal(err)
		}
		eng.Do(func() { c.Want(true) })
		synctest.Wait()
		if len(h.terms()) != 1 {
			t.Fatalf("%d terms won, want 1", len(h.terms()))
		}
		holder, _, _ := mb.Owner("x")
		env.jump(s.Remaining() + time.Millisecond) // the node's deadline has passed; the backend's lease has not
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, live := mb.Remaining(holder); !live {
			t.Fatalf("Session.Close after the local deadline closed the backend session: its terms ended without a release, and the Close skipped their lock-delay")
		}
	})
}

// Two claims on one session queued together, one with a delay the backend
// honours and one with a delay above its maximum: the refusal stops only
// the claim that asked for it; the other wins.
func TestRefusedLockDelayStopsOnlyItsClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New(memory.WithMaxLockDelay(time.Second))
		s, err := session.Open(context.Background(), b, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		eng := layer.MustOf(s)
		fine, refused := &delayed{d: time.Second}, &delayed{d: 2 * time.Second}
		cr, err := eng.Claim("refused", refused)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := eng.Claim("fine", fine)
		if err != nil {
			t.Fatal(err)
		}
		eng.Do(func() { cr.Want(true); cf.Want(true) })
		advance(time.Minute)
		refusals := func(h *delayed) []error {
			h.mu.Lock()
			defer h.mu.Unlock()
			return append([]error(nil), h.refuse...)
		}
		if len(fine.terms()) != 1 {
			t.Errorf("the claim whose delay the backend honours won %d terms, want 1 (refusals %v)", len(fine.terms()), refusals(fine))
		}
		if r := refusals(refused); len(refused.terms()) != 0 || len(r) != 1 || !errors.Is(r[0], session.ErrLockDelay) {
			t.Errorf("the claim whose delay is refused: %d terms, refusals %v; want none and one ErrLockDelay", len(refused.terms()), r)
		}
	})
}
