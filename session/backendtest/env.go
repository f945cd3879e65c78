package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// env is one subtest's view of the backend: its namespace and the promise
// it checks, which every failure message repeats.
type env struct {
	t       *testing.T
	cfg     Config
	ns      string
	promise string
	// initialised: Config.Init has run for ns (or must not: the subtest
	// checks an uninitialised namespace).
	initialised bool
	// advanced is the virtual time this subtest has let pass (only with
	// Config.Advance), which now reads.
	advanced time.Duration
}

// now reads the kit's view of the backend's time: the virtual time the
// subtest advanced, with Config.Advance, else the real clock. Only
// differences of two readings mean anything.
func (e *env) now() time.Time {
	if e.cfg.Advance != nil {
		return time.Unix(0, 0).Add(e.advanced)
	}
	return time.Now()
}

// newNamespace returns "kt" and 8 random hex digits: lowercase letters and
// digits only, so it is a valid key prefix, chroot element and table prefix
// on every backend.
func newNamespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "kt" + hex.EncodeToString(b[:])
}

// errorf reports a broken promise and goes on.
func (e *env) errorf(format string, args ...any) {
	e.t.Helper()
	e.t.Errorf("%s\n\tpromise: %s", fmt.Sprintf(format, args...), e.promise)
}

// fatalf reports a broken promise and stops the subtest.
func (e *env) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("%s\n\tpromise: %s", fmt.Sprintf(format, args...), e.promise)
}

// ctx is the context of one backend call.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), e.cfg.CallTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

// wait lets d of the backend's time pass: virtual time if the Config can
// advance it, else a real timer.
func (e *env) wait(d time.Duration) {
	e.t.Helper()
	if e.cfg.Advance != nil {
		e.cfg.Advance(e.t, d)
		e.advanced += d
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-e.t.Context().Done():
		e.t.Fatalf("test ended while waiting %v", d)
	}
}

// waitExpiry waits long enough for a session opened (or last renewed)
// before the call to have expired on the backend.
func (e *env) waitExpiry() {
	e.t.Helper()
	e.wait(e.cfg.Lease + e.cfg.ExpiryGrace)
}

// client is a new client of the subtest's namespace.
func (e *env) client() driver.Backend {
	e.t.Helper()
	if !e.initialised {
		e.initialised = true
		if e.cfg.Init != nil {
			e.cfg.Init(e.t, e.ns)
		}
	}
	b := e.cfg.NewBackend(e.t, e.ns)
	if b == nil {
		e.t.Fatalf("Config.NewBackend(%q) returned nil", e.ns)
	}
	return b
}

// sess is an open session of a client.
type sess struct {
	e      *env
	b      driver.Backend
	id     driver.ID
	opened driver.OpenReply
}

// open opens a session on a new client.
func (e *env) open() *sess {
	e.t.Helper()
	return e.openOn(e.client())
}

// openOn opens a session on client b, checks the reply, and closes the
// session when the test ends.
func (e *env) openOn(b driver.Backend) *sess {
	e.t.Helper()
	return e.openAs(b, driver.Owner{})
}

// openAs is openOn for a session that says who opened it.
func (e *env) openAs(b driver.Backend, owner driver.Owner) *sess {
	e.t.Helper()
	reply, err := b.Open(e.ctx(), driver.OpenRequest{LeaseDuration: e.cfg.Lease, Owner: owner})
	if err != nil {
		e.t.Fatalf("Open(lease %v): %v", e.cfg.Lease, err)
	}
	if reply.ID == "" {
		e.fatalf("Open returned an empty session ID")
	}
	if reply.Remaining <= 0 || reply.Remaining > e.cfg.Lease {
		e.errorf("Open: Remaining = %v, want in (0, %v]: a backend grants the requested lease or less", reply.Remaining, e.cfg.Lease)
	}
	if e.cfg.MaxLease > 0 && reply.Remaining > e.cfg.MaxLease {
		e.errorf("Open: Remaining = %v, more than Config.MaxLease %v: every grant is capped by the maximum lease", reply.Remaining, e.cfg.MaxLease)
	}
	s := &sess{e: e, b: b, id: reply.ID, opened: reply}
	e.t.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
		defer cancel()
		_ = b.Close(ctx, s.id)
	})
	return s
}

// renew renews the session, expecting success, and checks the reply's
// general shape.
func (s *sess) renew(known uint64) driver.RenewReply {
	s.e.t.Helper()
	reply, err := s.b.Renew(s.e.ctx(), driver.RenewRequest{ID: s.id, KnownVersion: known})
	if err != nil {
		s.e.fatalf("Renew(%s, known %d): %v", s.id, known, err)
	}
	if reply.Version == 0 {
		s.e.errorf("Renew: Version = 0; a version is never 0")
	}
	if reply.Version != known && !reply.Full {
		s.e.errorf("Renew(known %d): Version = %d but Full = false; the full list is due when the version differs", known, reply.Version)
	}
	if reply.Remaining <= 0 || reply.Remaining > s.e.cfg.Lease {
		s.e.errorf("Renew: Remaining = %v, want in (0, %v]", reply.Remaining, s.e.cfg.Lease)
	}
	if s.e.cfg.MaxLease > 0 && reply.Remaining > s.e.cfg.MaxLease {
		s.e.errorf("Renew: Remaining = %v, more than Config.MaxLease %v: every grant is capped by the maximum lease", reply.Remaining, s.e.cfg.MaxLease)
	}
	return reply
}

// acquireAll acquires names, expecting the call to succeed, and checks
// that the results match the request one for one.
func (s *sess) acquireAll(names ...string) []driver.AcquireResult {
	s.e.t.Helper()
	return s.acquireAllWith(0, names...)
}

// acquireAllWith is acquireAll with a lock-delay for the names it wins.
func (s *sess) acquireAllWith(lockDelay time.Duration, names ...string) []driver.AcquireResult {
	s.e.t.Helper()
	reply, err := s.b.Acquire(s.e.ctx(), driver.AcquireRequest{ID: s.id, Names: names, LockDelay: lockDelay})
	if err != nil {
		s.e.fatalf("Acquire(%s, %q, lock-delay %v): %v", s.id, names, lockDelay, err)
	}
	if len(reply.Results) != len(names) {
		s.e.fatalf("Acquire(%q): %d results, want one per name (%d)", names, len(reply.Results), len(names))
	}
	if reply.Quarantine != 0 {
		s.e.errorf("Acquire(%q): Quarantine = %v in a namespace that lost nothing (and was initialised, if Config.Init is set): a quarantine follows a data loss only", names, reply.Quarantine)
	}
	for i, r := range reply.Results {
		if r.Name != names[i] {
			s.e.errorf("Acquire: result %d is for %q, want %q: results come in request order", i, r.Name, names[i])
		}
		if r.Err != nil && r.Token != 0 {
			s.e.errorf("Acquire(%q): token %d with error %v; a failed name has token 0", r.Name, r.Token, r.Err)
		}
	}
	return reply.Results
}

// quarantineLen is the length of the backend's quarantine after a loss:
// one maximum lease, plus one maximum lock-delay when the backend honours
// lock-delays (the lost records took the delays with them).
func (e *env) quarantineLen() time.Duration {
	return e.cfg.MaxLease + e.cfg.MaxLockDelay
}

// quarantineSlack is what the quarantine checks allow for the backend's
// clock: its resolution (ZooKeeper's are milliseconds) and its rate against
// the kit's.
func (e *env) quarantineSlack() time.Duration {
	return 10*time.Millisecond + e.quarantineLen()/100
}

// quarantined acquires names on s in a namespace that lost its records
// (or was never initialised) at or before lost, and checks the backend's
// quarantine: no grant, and a Quarantine in (0, MaxLease + MaxLockDelay].
// With bound it also checks that the Quarantine is no shorter than that
// length less the time since lost, since the quarantine starts when the
// loss is noticed, which is after lost. It returns the Quarantine, and
// false when the reply came one quarantine or more after lost without a
// quarantine: the quarantine may rightly be over by then (a machine that
// stalled), so nothing was checked and the caller tries again.
func (s *sess) quarantined(lost time.Time, bound bool, names ...string) (time.Duration, bool) {
	s.e.t.Helper()
	e := s.e
	reply, err := s.b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: names})
	elapsed := time.Since(lost)
	if err != nil {
		e.fatalf("Acquire(%q) in a quarantine: %v; want a reply with Quarantine > 0 (Open and Acquire keep working; only grants stop)", names, err)
	}
	if len(reply.Results) != len(names) {
		e.fatalf("Acquire(%q): %d results, want one per name (%d)", names, len(reply.Results), len(names))
	}
	q, ml := reply.Quarantine, e.quarantineLen()
	var granted []driver.Lease
	for _, r := range reply.Results {
		if r.Token != 0 {
			granted = append(granted, driver.Lease{Name: r.Name, Token: r.Token})
		}
	}
	if (len(granted) > 0 || q <= 0) && elapsed >= ml-e.quarantineSlack() {
		if len(granted) > 0 {
			s.release(granted...)
		}
		e.t.Logf("Acquire(%q) answered %v after the loss, more than the quarantine (MaxLease + MaxLockDelay) %v: it may be over, nothing checked", names, elapsed, ml)
		return 0, false
	}
	for _, r := range reply.Results {
		if r.Token != 0 {
			e.errorf("Acquire(%q) in a quarantine: token %d; a quarantined backend grants nothing", r.Name, r.Token)
		}
	}
	switch {
	case q <= 0:
		e.fatalf("Acquire(%q): Quarantine = %v, want in (0, %v]: a backend that lost its records grants nothing for one maximum lease (plus one maximum lock-delay)", names, q, ml)
	case q > ml:
		e.errorf("Acquire(%q): Quarantine = %v, more than Config.MaxLease + Config.MaxLockDelay %v: the quarantine is one maximum lease (plus one maximum lock-delay)", names, q, ml)
	case bound && q < ml-elapsed-e.quarantineSlack():
		e.errorf("Acquire(%q): Quarantine = %v, %v after the loss: want at least MaxLease + MaxLockDelay %v less that: a shorter quarantine lets a term granted before the loss overlap a new one, or a paused holder's lock-delay go unhonoured", names, q, elapsed, ml)
	}
	return min(q, ml), true
}

// pass lets d of the backend's time pass, renewing s often enough to keep
// it alive.
func (s *sess) pass(d time.Duration) {
	s.e.t.Helper()
	step := max(s.opened.Remaining/3, time.Millisecond)
	for d > 0 {
		w := min(d, step)
		s.e.wait(w)
		d -= w
		s.renew(0)
	}
}

// acquire acquires one valid name and returns its token (0: refused).
func (s *sess) acquire(name string) uint64 {
	s.e.t.Helper()
	r := s.acquireAll(name)[0]
	if r.Err != nil {
		s.e.fatalf("Acquire(%q): %v", name, r.Err)
	}
	return r.Token
}

// acquireAfterExpiry acquires a name whose holder's session has ended
// (waitExpiry): at once, or, on a backend with Config.HoldAfterExpiry,
// asking again with s renewing until the hold is over. 0 never: it fails
// the subtest if the name is still refused by then.
func (s *sess) acquireAfterExpiry(name string) uint64 {
	s.e.t.Helper()
	hold := s.e.cfg.HoldAfterExpiry
	if hold <= 0 {
		return s.acquire(name)
	}
	end := s.e.now().Add(hold + 2*s.e.cfg.ExpiryGrace)
	step := max(hold/8, time.Millisecond)
	for {
		if tok := s.acquire(name); tok != 0 {
			return tok
		}
		if s.e.now().After(end) {
			s.e.fatalf("Acquire(%q) still refused %v after its holder's session ended (Config.HoldAfterExpiry %v, ExpiryGrace %v)", name, hold+2*s.e.cfg.ExpiryGrace, hold, s.e.cfg.ExpiryGrace)
		}
		s.pass(step)
	}
}

// mustAcquire acquires a name that is free and returns its token.
func (s *sess) mustAcquire(name string) uint64 {
	s.e.t.Helper()
	tok := s.acquire(name)
	if tok == 0 {
		s.e.fatalf("Acquire(%q) = token 0 for a free name", name)
	}
	return tok
}

func (s *sess) release(leases ...driver.Lease) {
	s.e.t.Helper()
	if err := s.b.Release(s.e.ctx(), driver.ReleaseRequest{ID: s.id, Leases: leases}); err != nil {
		s.e.fatalf("Release(%s, %v): %v", s.id, leases, err)
	}
}

func (s *sess) close() {
	s.e.t.Helper()
	if err := s.b.Close(s.e.ctx(), s.id); err != nil {
		s.e.fatalf("Close(%s): %v", s.id, err)
	}
}

// owned renews with KnownVersion 0 and returns the full owned set.
func (s *sess) owned() map[string]uint64 {
	s.e.t.Helper()
	r := s.renew(0)
	if !r.Full {
		s.e.errorf("Renew(known 0): Full = false; KnownVersion 0 asks for the full list")
	}
	return leaseMap(s.e, r.Leases)
}

func leaseMap(e *env, leases []driver.Lease) map[string]uint64 {
	e.t.Helper()
	m := make(map[string]uint64, len(leases))
	for _, l := range leases {
		if _, dup := m[l.Name]; dup {
			e.errorf("Renew lists %q twice", l.Name)
		}
		m[l.Name] = l.Token
	}
	return m
}

// wantOwned checks that the session owns exactly want.
func (s *sess) wantOwned(want map[string]uint64) {
	s.e.t.Helper()
	got := s.owned()
	if !mapsEqual(got, want) {
		s.e.errorf("Renew lists %v, want %v: a renewal reports exactly the leases the session owns", sorted(got), sorted(want))
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sorted(m map[string]uint64) []driver.Lease {
	out := make([]driver.Lease, 0, len(m))
	for k, v := range m {
		out = append(out, driver.Lease{Name: k, Token: v})
	}
	slices.SortFunc(out, func(a, b driver.Lease) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// isEnded reports whether err says the session is over.
func isEnded(err error) bool {
	return errors.Is(err, driver.ErrExpired) || errors.Is(err, driver.ErrClosed)
}
