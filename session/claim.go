package session

import (
	"fmt"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// claim is a lease name registered on a session for one user (an election,
// a lock, a partition of a group): the engine side of a layer.Claim, whose
// documentation its methods follow. Its methods are called with the
// engine's lock held.
type claim struct {
	s       *Session
	name    string
	h       layer.ClaimHandler
	want    bool
	queued  bool
	attempt uint64 // the attempt in flight, 0 if none
	held    *held
	dropped bool
	owner   any            // whose callbacks and tasks this claim's are, for self-waits; nil: the claim's own
	paced   bool           // its release notices wait for the session's notice window (PaceNotices)
	noticed bool           // a paced notice waits for the window's end
	runner  chan *inflight // a caller blocked in waitRunning for this claim runs its calls from here; nil if none
	delay   time.Duration  // the lock-delay its Acquires carry (layer.LockDelayer), fixed at register
}

// held is a lease the session holds for a claim: its term, valid or
// revoked while a voluntary handover waits for the term's task.
type held struct {
	t         *term.Term
	revokeFn  func(term.RevokeReason) bool
	token     uint64
	inc       *incarnation
	confirmed uint64 // engine sequence when the acquisition was confirmed
	revoked   bool
}

// register claims name on the session for h. It fails with an error
// wrapping deadline.ErrInvalidName for an invalid name, ErrAlreadyStarted
// if the name is already claimed on this session, and ErrClosed after
// Close. It takes the engine's lock: call it outside do.
func (s *Session) register(name string, h layer.ClaimHandler) (*claim, error) {
	if err := deadline.ValidateName(name); err != nil {
		return nil, err
	}
	if _, group := h.(layer.GroupHandler); !group && layer.IsGroupLease(name) {
		// An election or a lock under such a name would be read as a
		// group's member or hold one of its partitions (ADR 0191).
		return nil, fmt.Errorf("%w: %q has the form of a partition group's lease (<group>:m:<member> or <group>:p:<partition>), which only the group claims", deadline.ErrInvalidName, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == Closed {
		return nil, fmt.Errorf("%w: claim %q", ErrClosed, name)
	}
	if _, ok := s.claims[name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrAlreadyStarted, name)
	}
	c := &claim{s: s, name: name, h: h}
	if d, ok := h.(layer.LockDelayer); ok {
		c.delay = d.LockDelay()
	}
	s.claims[name] = c
	s.order = append(s.order, c)
	return c, nil
}

// queue marks the claim for the next Acquire, and the session as having
// one to send: pumpAcquire looks at the claims only then, so a renewal or
// a reply with nothing queued does not walk every claim.
func (c *claim) queue() {
	c.queued = true
	c.s.anyQueued = true
}

// setHeld changes the claim's held lease; every change moves the
// session's heldGen, which a renewal compares to know whether its owned
// set can still match the terms term for term.
// holds reports whether c's current term is the lease token of backend
// session inc. A nil claim holds nothing.
func (c *claim) holds(inc *incarnation, token uint64) bool {
	return c != nil && c.held != nil && c.held.inc == inc && c.held.token == token
}

func (c *claim) setHeld(h *held) {
	if h != nil || c.held != nil {
		c.s.heldGen++
	}
	c.held = h
}

// SetOwner makes key (a group of claims, for instance) the owner of the
// claim's callbacks and tasks for the self-wait rule
// (wouldWaitForSelf): a term's context then names key. By
// default a claim owns its own. Call it before the claim wins a term.
func (c *claim) SetOwner(key any) { c.owner = key }

// PaceNotices lets the claim's release notices wait for a batch (see
// Session.notice).
func (c *claim) PaceNotices() { c.paced = true }

// ownerKey is the claim's owner for self-waits.
func (c *claim) ownerKey() any {
	if c.owner != nil {
		return c.owner
	}
	return c
}

// kind is what the claim's handler calls itself in Snapshot, or "".
func (c *claim) kind() string {
	if d, ok := c.h.(layer.Describer); ok {
		k, _ := d.Describe()
		return k
	}
	return ""
}

// Name is the claimed lease name.
func (c *claim) Name() string { return c.name }

// Want starts (true) or stops (false) competing for the lease. Starting
// attempts at once. Stopping does not give up a lease already held: use
// Revoke and Release.
func (c *claim) Want(want bool) {
	if c.dropped || c.s.state == Closed {
		return
	}
	c.want = want
	if !want {
		c.queued = false
		return
	}
	if c.held == nil && c.attempt == 0 {
		c.queue()
		c.s.pumpAcquire()
	}
	c.s.armCandidate()
}

// Term is the current term, or nil. It may already be revoked while a
// voluntary handover waits to release its lease.
func (c *claim) Term() *term.Term {
	if c.held == nil {
		return nil
	}
	return c.held.t
}

// Revoke ends the current term for a voluntary reason (Stopped or
// SteppedDown) and keeps its lease until Release: the first step of the
// handover order. It returns the term, or nil if none is held.
func (c *claim) Revoke(reason term.RevokeReason) *term.Term {
	h := c.held
	if h == nil {
		return nil
	}
	c.s.revoke(c, h, reason)
	return h.t
}

// Release gives the current term's lease back, carrying its token, after
// revoking the term if it was not already. done, if not nil, runs with the
// lock held when the backend has answered (or the call failed, or the
// session ended, or at once if no lease is held): deliver OnRevoked from
// there. It reports whether a release was sent.
func (c *claim) Release(reason term.RevokeReason, done func()) bool {
	var r layer.Runner
	if done != nil {
		r = funcRunner(done) // a func is a pointer: no allocation
	}
	return c.ReleaseRun(reason, r)
}

// funcRunner is a func as a layer.Runner.
type funcRunner func()

func (f funcRunner) Run() { f() }

// ReleaseRun is Release with done.Run as done (nil: none).
func (c *claim) ReleaseRun(reason term.RevokeReason, done layer.Runner) bool {
	h := c.held
	if h == nil || h.inc.over {
		c.setHeld(nil)
		if h != nil {
			c.s.revoke(c, h, reason)
		}
		if done != nil {
			done.Run()
		}
		return false
	}
	c.setHeld(nil)
	c.s.revoke(c, h, reason)
	c.s.release(h.inc, driver.Lease{Name: c.name, Token: h.token}, done)
	if c.want {
		c.s.armCandidate()
	}
	return true
}

// Drop unregisters the claim, releasing its lease if one is held. The name
// can be claimed again afterwards.
func (c *claim) Drop() {
	if c.dropped {
		return
	}
	c.Release(term.Stopped, nil)
	c.dropped = true
	c.want = false
	c.queued = false
	c.attempt = 0 // a reply still in flight finds no claim of the name: its win is released
	s := c.s
	if s.claims[c.name] == c {
		delete(s.claims, c.name)
		s.retire(c.name) // its token entries are forgotten later (ADR 0295)
	}
	// The claim stays in order, skipped by every loop (nothing wanted,
	// queued, attempted or held), until the dropped outnumber the live:
	// then order is rebuilt in a new array, so a loop ranging over the old
	// one (a handler dropping claims from inside it) is undisturbed. Each
	// drop costs O(1) amortised: a Leave of 65,536 partitions used to copy
	// the whole list once per partition, seconds under the lock (issue 20,
	// item 8).
	s.dropped++
	if s.dropped >= minCompact && s.dropped*2 > len(s.order) {
		s.compactOrder()
	}
}

// minCompact is how many dropped claims order keeps before it is rebuilt:
// a lock per call (register, drop) would otherwise rebuild it, and grow it
// again, an allocation each, on every lock.
const minCompact = 16

// compactOrder rebuilds order without its dropped claims, in a new array.
// Lock held.
func (s *Session) compactOrder() {
	if s.dropped == 0 {
		return
	}
	live := make([]*claim, 0, len(s.order)-s.dropped)
	for _, c := range s.order {
		if !c.dropped {
			live = append(live, c)
		}
	}
	s.order = live
	s.dropped = 0
}
