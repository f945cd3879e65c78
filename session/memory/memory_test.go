package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

const lease = 10 * time.Second

// fixture is a backend on a virtual clock with helpers that fail the test
// on unexpected errors.
type fixture struct {
	t     testing.TB
	clock *memory.ManualClock
	b     *memory.Backend
}

func newFixture(t testing.TB, opts ...memory.Option) *fixture {
	t.Helper()
	clock := memory.NewManualClock(time.Unix(1_000_000, 0))
	b, err := memory.New(append([]memory.Option{memory.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{t: t, clock: clock, b: b}
}

func (f *fixture) open() driver.ID {
	f.t.Helper()
	r, err := f.b.Open(f.t.Context(), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	return r.ID
}

func (f *fixture) acquire(id driver.ID, name string) uint64 {
	f.t.Helper()
	r, err := f.b.Acquire(f.t.Context(), driver.AcquireRequest{ID: id, Names: []string{name}})
	if err != nil {
		f.t.Fatalf("Acquire(%q): %v", name, err)
	}
	if r.Results[0].Err != nil {
		f.t.Fatalf("Acquire(%q): %v", name, r.Results[0].Err)
	}
	return r.Results[0].Token
}

func (f *fixture) wantOwner(name string, id driver.ID, token uint64) {
	f.t.Helper()
	gotID, gotTok, ok := f.b.Owner(name)
	if id == "" {
		if ok {
			f.t.Errorf("Owner(%q) = %s, %d; want no owner", name, gotID, gotTok)
		}
		return
	}
	if !ok || gotID != id || gotTok != token {
		f.t.Errorf("Owner(%q) = %s, %d, %v; want %s, %d, true", name, gotID, gotTok, ok, id, token)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  memory.Option
	}{
		{"nil clock", memory.WithClock(nil)},
		{"nil id source", memory.WithIDSource(nil)},
		{"negative max lease", memory.WithMaxLease(-time.Second)},
		{"zero fraction", memory.WithGrantFraction(0, 12)},
		{"fraction above one", memory.WithGrantFraction(13, 12)},
		{"zero denominator", memory.WithGrantFraction(1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := memory.New(tc.opt)
			if !errors.Is(err, memory.ErrInvalidOption) || b != nil {
				t.Errorf("New(%s) = %v, %v; want nil, ErrInvalidOption", tc.name, b, err)
			}
		})
	}
}

func TestDefaultIDsAre128BitHex(t *testing.T) {
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Open(t.Context(), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ID) != 32 {
		t.Errorf("ID %q has %d characters, want 32 hex digits", r.ID, len(r.ID))
	}
	for _, c := range r.ID {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t.Errorf("ID %q has non-hex %q", r.ID, c)
		}
	}
}

func TestIDSourceDuplicateRefused(t *testing.T) {
	ids := []driver.ID{"s1", "s2", "s1"}
	f := newFixture(t, memory.WithIDSource(func() driver.ID { id := ids[0]; ids = ids[1:]; return id }))
	f.open()
	f.open()
	_, err := f.b.Open(t.Context(), driver.OpenRequest{LeaseDuration: lease})
	if !errors.Is(err, memory.ErrDuplicateID) {
		t.Errorf("Open with a repeated id: err = %v, want ErrDuplicateID", err)
	}
}

func TestOpenRejectsNonPositiveLease(t *testing.T) {
	f := newFixture(t)
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := f.b.Open(t.Context(), driver.OpenRequest{LeaseDuration: d}); !errors.Is(err, memory.ErrInvalidLease) {
			t.Errorf("Open(lease %v): err = %v, want ErrInvalidLease", d, err)
		}
	}
}

func TestMaxLeaseAndGrantFraction(t *testing.T) {
	// ZooKeeper-like: 6s cap, 5/12 reported. A 15s request gets 6s, reported
	// as 2.5s, and the session really lives the whole 6s.
	f := newFixture(t, memory.WithMaxLease(6*time.Second), memory.WithGrantFraction(5, 12))
	r, err := f.b.Open(t.Context(), driver.OpenRequest{LeaseDuration: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining != 2500*time.Millisecond {
		t.Errorf("Open: Remaining = %v, want 2.5s (5/12 of the 6s cap)", r.Remaining)
	}
	f.clock.Advance(5999 * time.Millisecond)
	if _, ok := f.b.Remaining(r.ID); !ok {
		t.Fatalf("session ended before its 6s lease")
	}
	rr, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: r.ID})
	if err != nil || rr.Remaining != 2500*time.Millisecond {
		t.Errorf("Renew = %v, %v; want 2.5s, nil", rr.Remaining, err)
	}
	f.clock.Advance(6 * time.Second)
	if _, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: r.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Renew 6s after the last: err = %v, want ErrExpired", err)
	}
}

func TestRemainingFollowsBackendClock(t *testing.T) {
	f := newFixture(t)
	id := f.open()
	f.clock.Advance(3 * time.Second)
	if got, ok := f.b.Remaining(id); !ok || got != lease-3*time.Second {
		t.Errorf("Remaining after 3s = %v, %v; want %v, true", got, ok, lease-3*time.Second)
	}
	f.clock.Advance(lease - 3*time.Second)
	if got, ok := f.b.Remaining(id); ok {
		t.Errorf("Remaining at the expiry instant = %v, true; want ended", got)
	}
}

func TestExpiryFreesLeasesAndNotifies(t *testing.T) {
	f := newFixture(t)
	var got []driver.Notice
	stop, err := f.b.Subscribe(func(n driver.Notice) { got = append(got, n) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a := f.open()
	ta := f.acquire(a, "x")
	f.clock.Advance(lease)
	f.wantOwner("x", "", 0)
	b := f.open() // the first call after the expiry notices it
	if want := []driver.Notice{{Name: "x"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notices = %v, want %v", got, want)
	}
	if tb := f.acquire(b, "x"); tb <= ta {
		t.Errorf("takeover token %d, want > %d", tb, ta)
	}
}

func TestExpire(t *testing.T) {
	f := newFixture(t)
	var got []driver.Notice
	stop, _ := f.b.Subscribe(func(n driver.Notice) { got = append(got, n) })
	defer stop()
	a := f.open()
	f.acquire(a, "x")
	f.acquire(a, "y")
	f.b.Expire(a)
	if fmt.Sprint(got) != fmt.Sprint([]driver.Notice{{Name: "x"}, {Name: "y"}}) {
		t.Errorf("notices = %v, want x then y", got)
	}
	if _, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: a}); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Renew after Expire: %v, want ErrExpired", err)
	}
	f.wantOwner("x", "", 0)
}

func TestLoseData(t *testing.T) {
	for _, tc := range []struct {
		name       string
		keepTokens bool
		opts       []memory.Option
		want       uint64 // token of the first term after the loss
	}{
		{"counters kept", true, nil, 3},
		{"new epoch", false, nil, 1<<40 | 1},
		{"broken backend without epochs", false, []memory.Option{memory.WithoutTokenEpochs()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts...)
			var got []driver.Notice
			stop, _ := f.b.Subscribe(func(n driver.Notice) { got = append(got, n) })
			defer stop()
			a := f.open()
			f.acquire(a, "x")
			if err := f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: 1}}}); err != nil {
				t.Fatal(err)
			}
			if tok := f.acquire(a, "x"); tok != 2 {
				t.Fatalf("second term token %d, want 2", tok)
			}
			got = nil
			f.b.LoseData(tc.keepTokens)
			if fmt.Sprint(got) != fmt.Sprint([]driver.Notice{{}}) {
				t.Errorf("notices = %v, want one empty Notice", got)
			}
			if _, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: a}); !errors.Is(err, driver.ErrExpired) {
				t.Errorf("Renew after LoseData: %v, want ErrExpired", err)
			}
			f.wantOwner("x", "", 0)
			b := f.open()
			if b == a {
				t.Errorf("id %s reused after LoseData", a)
			}
			// The quarantine: one maximum lease (the default cap) from
			// the first Acquire that found the epoch record missing.
			if q := f.quarantined(b, "x"); q != memory.DefaultMaxLease {
				t.Errorf("first Acquire after LoseData: Quarantine = %v, want %v", q, memory.DefaultMaxLease)
			}
			f.pass(b, memory.DefaultMaxLease-time.Second)
			if q := f.quarantined(b, "x"); q != time.Second {
				t.Errorf("Acquire %v later: Quarantine = %v, want 1s: the quarantine is measured from its start, not restarted", memory.DefaultMaxLease-time.Second, q)
			}
			f.pass(b, time.Second)
			if tok := f.acquire(b, "x"); tok != tc.want {
				t.Errorf("token after LoseData = %#x, want %#x", tok, tc.want)
			}
		})
	}
}

// pass lets d of virtual time pass, renewing session id often enough to
// keep it alive.
func (f *fixture) pass(id driver.ID, d time.Duration) {
	f.t.Helper()
	for d > 0 {
		step := min(d, lease/2)
		f.clock.Advance(step)
		d -= step
		if _, err := f.b.Renew(f.t.Context(), driver.RenewRequest{ID: id}); err != nil {
			f.t.Fatalf("Renew: %v", err)
		}
	}
}

// quarantined acquires name for id, expecting a quarantine, and returns it.
func (f *fixture) quarantined(id driver.ID, name string) time.Duration {
	f.t.Helper()
	r, err := f.b.Acquire(f.t.Context(), driver.AcquireRequest{ID: id, Names: []string{name}})
	if err != nil {
		f.t.Fatalf("Acquire(%q): %v", name, err)
	}
	if r.Results[0].Token != 0 || r.Results[0].Err != nil {
		f.t.Errorf("Acquire(%q) in a quarantine: token %d, err %v; want no grant, no error", name, r.Results[0].Token, r.Results[0].Err)
	}
	if r.Quarantine <= 0 {
		f.t.Errorf("Acquire(%q): Quarantine = %v, want positive", name, r.Quarantine)
	}
	f.wantOwner(name, "", 0)
	return r.Quarantine
}

// The quarantine is one maximum lease (WithMaxLease) on the backend's
// clock, and every grant is capped by it, default or not.
func TestQuarantineIsMaxLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []memory.Option
		max  time.Duration
	}{
		{"default cap", nil, memory.DefaultMaxLease},
		{"zero is the default", []memory.Option{memory.WithMaxLease(0)}, memory.DefaultMaxLease},
		{"explicit cap", []memory.Option{memory.WithMaxLease(4 * time.Second)}, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts...)
			r, err := f.b.Open(t.Context(), driver.OpenRequest{LeaseDuration: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining != tc.max {
				t.Errorf("Open(lease 1h): Remaining = %v, want the cap %v", r.Remaining, tc.max)
			}
			f.acquire(r.ID, "x")
			f.b.LoseData(false)
			b := f.open()
			f.pass(b, time.Second) // the quarantine starts when noticed, not at the loss
			if q := f.quarantined(b, "x"); q != tc.max {
				t.Errorf("Quarantine = %v, want %v", q, tc.max)
			}
			f.pass(b, tc.max-1)
			f.quarantined(b, "x")
			f.pass(b, 1)
			if tok := f.acquire(b, "x"); tok == 0 {
				t.Errorf("Acquire after the quarantine: token 0, want a grant")
			}
		})
	}
}

// A namespace made uninitialised is quarantined at its first Acquire
// unless Init created its epoch record; Init after that changes nothing.
func TestUninitialisedNamespace(t *testing.T) {
	f := newFixture(t, memory.WithUninitialisedNamespace(), memory.WithMaxLease(lease))
	a := f.open() // Open works during a quarantine
	if q := f.quarantined(a, "x"); q != lease {
		t.Errorf("first Acquire: Quarantine = %v, want %v", q, lease)
	}

	f = newFixture(t, memory.WithUninitialisedNamespace())
	if err := f.b.Init(t.Context()); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if tok := f.acquire(f.open(), "x"); tok != 1 {
		t.Errorf("first Acquire after Init: token %d, want 1", tok)
	}
	f.b.FailCalls(errors.New("down"))
	if err := f.b.NewClient().Init(t.Context()); err != nil {
		t.Errorf("Init on another client: %v", err)
	}
	if err := f.b.Init(t.Context()); err == nil {
		t.Errorf("Init with FailCalls: nil error")
	}
}

// The broken variant the conformance kit must catch.
func TestWithoutQuarantine(t *testing.T) {
	f := newFixture(t, memory.WithoutQuarantine())
	f.acquire(f.open(), "x")
	f.b.LoseData(false)
	if tok := f.acquire(f.open(), "x"); tok == 0 {
		t.Errorf("WithoutQuarantine: no grant after LoseData, want one at once (the broken backend)")
	}
}

func TestFailCalls(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	boom := errors.New("boom")
	f.b.FailCalls(boom)
	_, err := f.b.Acquire(t.Context(), driver.AcquireRequest{ID: a, Names: []string{"x"}})
	if !errors.Is(err, boom) {
		t.Errorf("Acquire with FailCalls: err = %v, want boom", err)
	}
	f.wantOwner("x", "", 0) // not applied
	f.clock.Advance(lease / 2)
	if _, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: a}); !errors.Is(err, boom) {
		t.Errorf("Renew with FailCalls: err = %v, want boom", err)
	}
	if left, _ := f.b.Remaining(a); left != lease/2 {
		t.Errorf("a failed Renew extended the session: Remaining %v, want %v", left, lease/2)
	}
	f.b.FailCalls(nil)
	if tok := f.acquire(a, "x"); tok != 1 {
		t.Errorf("Acquire after FailCalls(nil): token %d, want 1", tok)
	}
}

func TestDropReplies(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	f.b.DropReplies(2)
	for i := range 2 {
		_, err := f.b.Acquire(t.Context(), driver.AcquireRequest{ID: a, Names: []string{"x"}})
		if !errors.Is(err, memory.ErrReplyLost) {
			t.Errorf("call %d: err = %v, want ErrReplyLost", i, err)
		}
	}
	f.wantOwner("x", a, 1) // applied although the reply was lost
	if tok := f.acquire(a, "x"); tok != 1 {
		t.Errorf("third call: token %d, want 1 (the lost reply's term)", tok)
	}
}

func TestStatsCountEveryCall(t *testing.T) {
	f := newFixture(t)
	other := f.b.NewClient()
	a := f.open()
	f.b.FailCalls(errors.New("down"))
	for range 3 {
		_, _ = f.b.Renew(t.Context(), driver.RenewRequest{ID: a})
	}
	f.b.FailCalls(nil)
	_, _ = f.b.Acquire(t.Context(), driver.AcquireRequest{ID: a, Names: []string{"x", "y"}})
	_ = f.b.Release(t.Context(), driver.ReleaseRequest{ID: a})
	_ = f.b.Close(t.Context(), a)
	want := memory.Stats{Open: 1, Renew: 3, Acquire: 1, Release: 1, Close: 1}
	if got := f.b.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if got := other.Stats(); got != (memory.Stats{}) {
		t.Errorf("another client's Stats = %+v, want zero: each client counts its own calls", got)
	}
}

func TestClientsShareStateNotFaults(t *testing.T) {
	f := newFixture(t)
	other := f.b.NewClient()
	f.b.FailCalls(errors.New("partitioned"))
	r, err := other.Open(t.Context(), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open on another client: %v", err)
	}
	f.b.FailCalls(nil)
	tok := f.acquire(r.ID, "x") // a session is not tied to the client that opened it
	f.wantOwner("x", r.ID, tok)
}

func TestCancelledContextNotApplied(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.b.Acquire(ctx, driver.AcquireRequest{ID: a, Names: []string{"x"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	f.wantOwner("x", "", 0)
}

func TestReleaseInvalidNameReleasesNothing(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	tok := f.acquire(a, "x")
	err := f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tok}, {Name: "a/b", Token: 1}}})
	if !errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("Release with an invalid name: err = %v, want ErrInvalidName", err)
	}
	f.wantOwner("x", a, tok)
}

func TestVersionsNeverRepeat(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	seen := map[uint64]bool{}
	check := func(step string) {
		t.Helper()
		r, err := f.b.Renew(t.Context(), driver.RenewRequest{ID: a})
		if err != nil {
			t.Fatal(err)
		}
		if r.Version == 0 || seen[r.Version] {
			t.Fatalf("%s: version %d is 0 or was used before", step, r.Version)
		}
		seen[r.Version] = true
	}
	check("open")
	for i := range 20 {
		tok := f.acquire(a, "x")
		check(fmt.Sprintf("acquire %d", i))
		if err := f.b.Release(t.Context(), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("release %d", i))
	}
}

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }

// The lock-delay on the memory backend's clock: an expiry (the lease ran
// out, or Expire) delays the name from the session's end; a Release or a
// Close does not; the name is broadcast when its delay has passed, and its
// record goes then (ADR 0240).
func TestLockDelay(t *testing.T) {
	const delay = 5 * time.Second
	clock := memory.NewManualClock(time.Unix(1_000_000, 0))
	b, err := memory.New(memory.WithClock(clock), memory.WithMaxLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var got []driver.Notice
	stop, _ := b.Subscribe(func(n driver.Notice) { got = append(got, n) })
	defer stop()
	open := func() driver.ID {
		r, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	acquire := func(id driver.ID, d time.Duration, names ...string) []uint64 {
		r, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names, LockDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]uint64, len(r.Results))
		for i, res := range r.Results {
			toks[i] = res.Token
		}
		return toks
	}
	a, c := open(), open()
	acquire(a, delay, "expired", "released", "closed-with")
	acquire(a, 0, "no-delay")
	_ = b.Release(ctx, driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "released", Token: 1}}})
	if toks := acquire(c, 0, "released"); toks[0] == 0 {
		t.Error("a released name was delayed")
	}
	clock.Advance(time.Second)
	got = nil
	b.Expire(a) // at 1s: "expired" and "closed-with" wait until 6s
	if fmt.Sprint(got) != fmt.Sprint([]driver.Notice{{Name: "no-delay"}}) {
		t.Errorf("notices at the expiry = %v, want only the name without a delay", got)
	}
	if toks := acquire(c, 0, "expired", "closed-with", "no-delay"); toks[0] != 0 || toks[1] != 0 || toks[2] == 0 {
		t.Errorf("tokens right after the expiry = %v, want the delayed names refused and the other granted", toks)
	}
	if n := b.NameRecords(); n != 4 { // released, no-delay held by c; two delays
		t.Errorf("NameRecords = %d, want 4", n)
	}
	clock.Advance(delay - time.Millisecond)
	if toks := acquire(c, 0, "expired"); toks[0] != 0 {
		t.Error("granted 1ms before the delay passed")
	}
	clock.Advance(time.Millisecond)
	got = nil
	if _, err := b.Renew(ctx, driver.RenewRequest{ID: c}); err != nil { // any call notices
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]driver.Notice{{Name: "closed-with"}, {Name: "expired"}}) {
		t.Errorf("notices when the delay passed = %v, want both names, sorted", got)
	}
	if n := b.NameRecords(); n != 2 {
		t.Errorf("NameRecords after the delays = %d, want 2: a passed delay leaves nothing", n)
	}
	// A session's Close skips the delay.
	d := open()
	acquire(d, delay, "closed")
	_ = b.Close(ctx, d)
	if toks := acquire(c, 0, "closed"); toks[0] == 0 {
		t.Error("a name freed by Close was delayed")
	}
	// Out of range: the whole request fails, nothing written.
	for _, bad := range []time.Duration{-time.Nanosecond, delay + time.Nanosecond} {
		_, err := b.Acquire(ctx, driver.AcquireRequest{ID: c, Names: []string{"fresh"}, LockDelay: bad})
		if !errors.Is(err, driver.ErrLockDelay) || !strings.Contains(err.Error(), "WithMaxLockDelay") {
			t.Errorf("lock-delay %v: %v, want ErrLockDelay naming WithMaxLockDelay", bad, err)
		}
	}
	if _, _, ok := b.Owner("fresh"); ok {
		t.Error("a refused request wrote a lease")
	}
}

// After a data loss the quarantine is the maximum lease plus the maximum
// lock-delay: the lost records took their delays along.
func TestQuarantineCoversTheMaxLockDelay(t *testing.T) {
	clock := memory.NewManualClock(time.Unix(1_000_000, 0))
	b, _ := memory.New(memory.WithClock(clock), memory.WithMaxLease(10*time.Second), memory.WithMaxLockDelay(5*time.Second))
	s, _ := b.Open(t.Context(), driver.OpenRequest{LeaseDuration: 10 * time.Second})
	b.LoseData(false)
	s, _ = b.Open(t.Context(), driver.OpenRequest{LeaseDuration: 10 * time.Second})
	r, err := b.Acquire(t.Context(), driver.AcquireRequest{ID: s.ID, Names: []string{"x"}})
	if err != nil || r.Quarantine != 15*time.Second {
		t.Fatalf("Acquire after the loss: quarantine %v, err %v; want 15s", r.Quarantine, err)
	}
}

// Released names leave no record behind, however many were used (issue
// 23), and tokens still rise per name.
func TestReleasedNamesLeaveNothing(t *testing.T) {
	b, _ := memory.New()
	ctx := t.Context()
	s, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Hour})
	last := map[string]uint64{}
	for round := range 3 {
		for i := range 5000 {
			name := fmt.Sprintf("n%d", i)
			r, _ := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{name}})
			tok := r.Results[0].Token
			if tok <= last[name] {
				t.Fatalf("round %d: %s token %d after %d", round, name, tok, last[name])
			}
			last[name] = tok
			_ = b.Release(ctx, driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: name, Token: tok}}})
		}
	}
	if n := b.NameRecords(); n != 0 {
		t.Errorf("NameRecords after releasing every name = %d, want 0", n)
	}
}
