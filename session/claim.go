package session

import (
	"fmt"

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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == Closed {
		return nil, fmt.Errorf("%w: claim %q", ErrClosed, name)
	}
	if _, ok := s.claims[name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrAlreadyStarted, name)
	}
	c := &claim{s: s, name: name, h: h}
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
	h := c.held
	if h == nil || h.inc.over {
		c.setHeld(nil)
		if h != nil {
			c.s.revoke(c, h, reason)
		}
		if done != nil {
			done()
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
	if c.s.claims[c.name] == c {
		delete(c.s.claims, c.name)
	}
	for i, o := range c.s.order {
		if o == c {
			c.s.order = append(c.s.order[:i:i], c.s.order[i+1:]...)
			break
		}
	}
}
