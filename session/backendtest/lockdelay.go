package backendtest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// lockDelayCases check the lock-delay (driver.AcquireRequest.LockDelay,
// ADR 0240), only with Config.MaxLockDelay.
var lockDelayCases = []testCase{
	{
		name:    "LockDelayAfterExpiry",
		waits:   true,
		promise: "a term won with a lock-delay whose session expires leaves its name refused (token 0, no error), to every other session of every client, for the delay after the session's end on the backend's clock; then the name is granted with a higher token",
		f:       lockDelayAfterExpiry,
	},
	{
		name:    "LockDelaySkippedOnRelease",
		promise: "a released name is free at once, whatever lock-delay its term was won with",
		f: func(e *env) {
			if skipLockDelay(e) {
				return
			}
			a, b := e.open(), e.open()
			ta := a.mustAcquireWith(e.cfg.MaxLockDelay, "x")
			a.release(driver.Lease{Name: "x", Token: ta})
			if tb := b.acquire("x"); tb <= ta {
				e.errorf("Acquire right after the holder released a term won with lock-delay %v: token %d, want > %d: a release skips the delay", e.cfg.MaxLockDelay, tb, ta)
			}
		},
	},
	{
		name:    "LockDelaySkippedOnClose",
		promise: "a name freed by its holder's Close is free at once, whatever lock-delay its term was won with",
		f: func(e *env) {
			if skipLockDelay(e) {
				return
			}
			a, b := e.open(), e.open()
			ta := a.mustAcquireWith(e.cfg.MaxLockDelay, "x")
			a.close()
			if tb := b.acquire("x"); tb <= ta {
				e.errorf("Acquire right after the holder's Close ended a term won with lock-delay %v: token %d, want > %d: a Close skips the delay", e.cfg.MaxLockDelay, tb, ta)
			}
		},
	},
	{
		name:    "LockDelayOutOfRangeRefused",
		promise: "an Acquire asking for a lock-delay above the backend's maximum, or a negative one, fails as a whole with an error wrapping driver.ErrLockDelay that names WithMaxLockDelay, and writes nothing; the maximum itself is honoured",
		f: func(e *env) {
			if skipLockDelay(e) {
				return
			}
			d := e.cfg.MaxLockDelay
			s := e.open()
			for _, bad := range []time.Duration{d + time.Millisecond, -time.Millisecond} {
				reply, err := s.b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: []string{"x", "y"}, LockDelay: bad})
				switch {
				case !errors.Is(err, driver.ErrLockDelay):
					e.errorf("Acquire with lock-delay %v (maximum %v): err = %v, want an error wrapping driver.ErrLockDelay", bad, d, err)
				case !strings.Contains(err.Error(), "WithMaxLockDelay"):
					e.errorf("Acquire with lock-delay %v: error %q does not name the option WithMaxLockDelay: an operator must learn what to change", bad, err)
				}
				for _, r := range reply.Results {
					if r.Token != 0 {
						e.errorf("Acquire with lock-delay %v: %q granted (token %d) although the request failed", bad, r.Name, r.Token)
					}
				}
			}
			s.wantOwned(map[string]uint64{})
			other := e.open()
			for _, r := range other.acquireAll("x", "y") {
				if r.Token == 0 {
					e.errorf("Acquire(%q) after a refused lock-delay: token 0: the refused request must write nothing", r.Name)
				}
			}
			s.mustAcquireWith(d, "z")
		},
	},
}

// skipLockDelay skips the subtest when the backend declares no lock-delay.
func skipLockDelay(e *env) bool {
	if e.cfg.MaxLockDelay == 0 {
		e.t.Skip("Config.MaxLockDelay is zero: the backend declares no lock-delay")
		return true
	}
	return false
}

// mustAcquireWith acquires a free name with a lock-delay and returns its
// token.
func (s *sess) mustAcquireWith(lockDelay time.Duration, name string) uint64 {
	s.e.t.Helper()
	r := s.acquireAllWith(lockDelay, name)[0]
	if r.Err != nil || r.Token == 0 {
		s.e.fatalf("Acquire(%q, lock-delay %v) of a free name: token %d, err %v", name, lockDelay, r.Token, r.Err)
	}
	return r.Token
}

// lockDelaySlack is what the lock-delay checks allow for the backend's
// clock against the kit's: nothing but a nanosecond-scale margin in virtual
// time, the clock's resolution and rate on a real server.
func (e *env) lockDelaySlack() time.Duration {
	if e.cfg.Advance != nil {
		return time.Millisecond
	}
	return 10*time.Millisecond + e.cfg.MaxLockDelay/100
}

func lockDelayAfterExpiry(e *env) {
	if skipLockDelay(e) {
		return
	}
	// A machine that stalls through the end of the delay lets no attempt
	// land inside it: nothing is then checked, and the scenario runs
	// again on other names.
	const attempts = 2
	for i := range attempts {
		if lockDelayOnce(e, fmt.Sprintf("w%d", i), fmt.Sprintf("x%d", i)) || e.t.Failed() {
			return
		}
	}
	e.errorf("%d times no Acquire of the delayed names was answered in the last %v before the lock-delay's end (the machine stalled?): the delay could not be observed; raise Config.MaxLockDelay for this machine", attempts, lockDelayWindow(e.cfg.MaxLockDelay))
}

// lockDelayWindow is the stretch before the delay's end in which a refusal
// must be seen for the check to say anything.
func lockDelayWindow(d time.Duration) time.Duration { return d / 4 }

// lockDelayOnce wins names (two, in one request, each carrying the delay)
// with the maximum lock-delay, lets the session expire and checks that
// each is refused to other sessions until the delay after the session's
// earliest end, then granted. It returns false when no refusal was
// answered in the delay's last stretch (nothing was checked).
func lockDelayOnce(e *env, names ...string) bool {
	d, slack := e.cfg.MaxLockDelay, e.lockDelaySlack()
	step := max(min(d, e.cfg.Lease)/8, time.Millisecond)
	// Every client first, then the sessions: a's must not spend its lease
	// waiting for a client's construction.
	ca, cb, cc := e.client(), e.client(), e.client()
	a := e.openOn(ca)
	old := map[string]uint64{}
	for _, r := range a.acquireAllWith(d, names...) {
		if r.Err != nil || r.Token == 0 {
			e.fatalf("Acquire(%q, lock-delay %v) of free names: %q got token %d, err %v", names, d, r.Name, r.Token, r.Err)
		}
		old[r.Name] = r.Token
	}
	b, c := e.openOn(cb), e.openOn(cc)
	// a's last proof of life bounds its end: no sooner than the Remaining
	// of a renewal after the renewal was sent, no later than a lease and
	// the backend's grace after its reply.
	sent := e.now()
	r := a.renew(0)
	earliestEnd := sent.Add(r.Remaining)
	latestEnd := e.now().Add(e.cfg.Lease + e.cfg.ExpiryGrace)
	// A grant whose reply came before refusedUntil was surely made within
	// the delay. The delay may count from the first candidate that found
	// the session ended, up to a step after latestEnd, and end up to a
	// grace late (a TTL's rounding): the names are due by grantBy.
	refusedUntil := earliestEnd.Add(d - slack)
	grantBy := latestEnd.Add(step + d + e.cfg.ExpiryGrace + slack)
	justBefore := refusedUntil.Add(-slack) // one attempt lands there
	window := refusedUntil.Add(-lockDelayWindow(d))
	observed := false // a refusal answered in [window, refusedUntil)
	owned := map[*sess]map[string]uint64{b: {}, c: {}}
	for {
		before := e.now()
		// b and c ask with no delay of their own: the delay is the ended
		// term's. c, on another client, checks that the delay lives in the
		// store, not in the memory of the client that found the end.
		for _, s := range []*sess{b, c} {
			var pending []string
			for _, n := range names {
				if _, ok := old[n]; ok {
					pending = append(pending, n)
				}
			}
			if len(pending) == 0 {
				break
			}
			results := s.acquireAll(pending...)
			after := e.now()
			for _, r := range results {
				if r.Err != nil {
					e.fatalf("Acquire(%q): %v", r.Name, r.Err)
				}
				if r.Token == 0 {
					if !after.Before(window) && after.Before(refusedUntil) {
						observed = true
					}
					continue
				}
				if after.Before(refusedUntil) {
					e.errorf("Acquire of %q, won with %q in one request whose session then ended: granted (token %d) %v before the lock-delay (%v) from the session's earliest end had passed: every name of the request is refused for the delay after an expiry",
						r.Name, names, r.Token, refusedUntil.Add(slack).Sub(after), d)
				}
				if r.Token <= old[r.Name] {
					e.errorf("Acquire of %q after the lock-delay: token %d, want > %d", r.Name, r.Token, old[r.Name])
				}
				owned[s][r.Name] = r.Token
				delete(old, r.Name)
			}
		}
		if len(old) == 0 {
			b.wantOwned(owned[b])
			c.wantOwned(owned[c])
			if !observed {
				e.t.Logf("no Acquire of %q answered in the last %v before the lock-delay's end: nothing checked", names, lockDelayWindow(d))
			}
			return observed
		}
		if before.After(grantBy) {
			e.fatalf("%q still refused %v after its holder's session ended at the latest, with a lock-delay of %v (Config.ExpiryGrace %v): the delay counts once, from the session's end or from the first candidate that found it ended, and must then end",
				slices.Sorted(maps.Keys(old)), before.Sub(latestEnd), d, e.cfg.ExpiryGrace)
		}
		next := step
		if before.Before(justBefore) && before.Add(step).After(justBefore) {
			next = justBefore.Sub(before)
		}
		b.pass(next)
		c.renew(0)
	}
}
