package election

import (
	"time"

	"github.com/simba-go/simba/session/driver"
)

// The simulation's lock-delay check (ADR 0240). With simConfig.lockDelay,
// the elections of "alpha" ask for the delay, those of "beta" for half of
// it, those of "gamma" for none (so one Acquire carries one delay and the
// engine must split its batches) or, with simConfig.sharedDelay, for
// alpha's (so one Acquire carries two names with one delay, each of which
// the backend must delay), over a backend built with that maximum.
// The checker watches the backend's lease of each name after every event
// (memory.Backend.Owner, on the backend's clock: the simulation's true
// time) and at every call reaching it:
//
//   - a term that ends without a release (its session expired on the
//     backend: a pause, a crash, a lost renewal) leaves its name to nobody
//     for its delay after the session's end: a grant before that is a
//     violation ("grant within the lock-delay");
//   - a term released (Release with its token, or its session's Close)
//     leaves the name free at once: an Acquire of a free, released name
//     refused is a violation ("released name delayed");
//   - a data loss takes the delays with it, so no name is granted for the
//     maximum lease plus the maximum lock-delay after it ("grant within the
//     quarantine").

// simLockDelays is the checker's state, one entry per name.
type simLockDelays map[string]*simDelayState

type simDelayState struct {
	cur *simHolder // the holder last seen on the backend, nil if none
	// The last term's end, once cur is gone: released (no delay), or not,
	// then endAtLeast (a lower bound of its session's end on the backend's
	// clock) and its delay.
	released   bool
	endAtLeast int64
	delay      time.Duration
	lostAt     int64 // the last data loss, 0 if none
}

type simHolder struct {
	id         driver.ID
	token      uint64
	delay      time.Duration // the delay of the request that won the term
	endAtLeast int64         // its session ends no sooner (true time)
}

// lockDelayOf is the delay the elections of name ask for.
func (c simConfig) lockDelayOf(name string) time.Duration {
	switch name {
	case "alpha":
		return c.lockDelay
	case "beta":
		return c.lockDelay / 2
	case "gamma":
		if c.sharedDelay {
			return c.lockDelay
		}
	}
	return 0
}

func (w *sim) delayState(name string) *simDelayState {
	if w.delays == nil {
		w.delays = simLockDelays{}
	}
	st := w.delays[name]
	if st == nil {
		st = &simDelayState{}
		w.delays[name] = st
	}
	return st
}

// delayGranted checks that the request carries the delay of its names'
// elections, records the delay of each term the real reply granted (the
// first grant of a token: a re-acquire answers the term's token), and
// checks the names it refused.
func (w *sim) delayGranted(req driver.AcquireRequest, r driver.AcquireReply) {
	if w.cfg.lockDelay == 0 {
		return
	}
	for _, name := range req.Names {
		if want := w.cfg.lockDelayOf(name); w.tracked(name) && req.LockDelay != want {
			w.violate("an Acquire of %s carries lock-delay %v, its elections ask for %v (one Acquire, one delay: the engine carries each claim's)", name, req.LockDelay, want)
		}
	}
	for _, res := range r.Results {
		if !w.tracked(res.Name) {
			continue
		}
		st := w.delayState(res.Name)
		switch {
		case res.Token != 0:
			// The delay the term should carry: its elections', whatever
			// the request said (checked above).
			k := simGrant{res.Name, res.Token}
			if _, ok := w.grants[k]; !ok {
				w.grants[k] = w.cfg.lockDelayOf(res.Name)
			}
			w.holderSeen(res.Name, st)
		case res.Err == nil && r.Quarantine == 0 && st.cur == nil && st.released:
			if _, _, held := w.backend.Owner(res.Name); !held {
				w.violate("%s refused to %s although its last term was released and nobody holds it: a release skips the lock-delay (released name delayed)", res.Name, req.ID)
			}
		}
	}
}

// simGrant names a term on the backend.
type simGrant struct {
	name  string
	token uint64
}

func (w *sim) tracked(name string) bool {
	for _, n := range w.cfg.names {
		if n == name {
			return true
		}
	}
	return false
}

// endsByRelease marks the names whose current lease the call ends: the
// leases (Release) or every lease (Close, leases nil) of session id held
// now. It returns a function to call after the backend has answered.
func (w *sim) endsByRelease(id driver.ID, leases []driver.Lease) func() {
	if w.cfg.lockDelay == 0 {
		return func() {}
	}
	type before struct {
		name  string
		token uint64
	}
	var held []before
	for _, name := range w.cfg.names {
		owner, tok, ok := w.backend.Owner(name)
		if !ok || owner != id {
			continue
		}
		if leases != nil {
			mine := false
			for _, l := range leases {
				mine = mine || l.Name == name && l.Token == tok
			}
			if !mine {
				continue
			}
		}
		held = append(held, before{name, tok})
	}
	return func() {
		for _, h := range held {
			if _, tok, ok := w.backend.Owner(h.name); ok && tok == h.token {
				continue // not released (the call failed)
			}
			st := w.delayState(h.name)
			st.cur, st.released, st.delay = nil, true, 0
		}
	}
}

// delayDataLost notes a data loss: the leases and their delays are gone,
// and the quarantine covers them.
func (w *sim) delayDataLost() {
	if w.cfg.lockDelay == 0 {
		return
	}
	for _, name := range w.cfg.names {
		st := w.delayState(name)
		st.cur, st.released, st.delay, st.lostAt = nil, false, 0, w.now
	}
}

// checkDelays follows each name's lease on the backend after an event.
func (w *sim) checkDelays() {
	if w.cfg.lockDelay == 0 {
		return
	}
	for _, name := range w.cfg.names {
		w.holderSeen(name, w.delayState(name))
	}
}

// holderSeen compares the backend's lease of name with the last one seen:
// a lease gone without a release ended by its session's end, which the
// delay counts from; a new lease is checked against the last end's delay
// and the last data loss's quarantine.
func (w *sim) holderSeen(name string, st *simDelayState) {
	owner, tok, ok := w.backend.Owner(name)
	if st.cur != nil && (!ok || tok != st.cur.token) {
		st.released, st.endAtLeast, st.delay = false, st.cur.endAtLeast, st.cur.delay
		st.cur = nil
	}
	if !ok {
		return
	}
	if st.cur == nil {
		if !st.released && st.delay > 0 && w.now < st.endAtLeast+int64(st.delay) {
			w.violate("%s granted to %s (token %d) %v after its last term's session ended at the earliest, within that term's lock-delay of %v (grant within the lock-delay)",
				name, owner, tok, time.Duration(w.now-st.endAtLeast), st.delay)
		}
		if q := int64(w.timing.LeaseDuration + w.cfg.lockDelay); st.lostAt > 0 && w.now < st.lostAt+q {
			w.violate("%s granted (token %d) %v after a data loss, within the quarantine of the maximum lease plus the maximum lock-delay %v (grant within the quarantine)",
				name, tok, time.Duration(w.now-st.lostAt), time.Duration(q))
		}
		st.cur = &simHolder{id: owner, token: tok, delay: w.grants[simGrant{name, tok}], endAtLeast: w.now}
	}
	if rem, live := w.backend.Remaining(owner); live {
		st.cur.endAtLeast = max(st.cur.endAtLeast, w.now+int64(rem))
	}
}
