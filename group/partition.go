package group

import (
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"

	"github.com/simba-go/simba/term"
)

// part is one partition as this member sees it: its claim (registered only
// while wanted or held), its current term and its handover. Guarded by the
// session's lock.
type part struct {
	g         *Group
	p         int
	c         layer.Claim
	claiming  bool // the claim is being registered outside the lock
	want      bool // assigned to this member
	term      *term.Term
	ts        *termState
	running   int // tasks of term still running
	hand      *handover
	coolUntil time.Time // an OnAssigned was refused: not taken again before
}

// handover is a voluntary end of a partition's term in progress.
type handover struct {
	t         *term.Term
	bound     func() bool
	done      func()
	completed bool
}

// LockDelay is the lock-delay of the partition's terms (WithLockDelay).
func (pt *part) LockDelay() time.Duration { return pt.g.lockDelay }

// Refused hears the partition's attempts that did not win. Only a refused
// lock-delay matters here: the engine has stopped the claim (the backend
// would refuse every attempt alike), and OnError is told, once for the
// group until a partition is won, not once per partition. The partition
// stays assigned to this member, so no rebalance retries it in a loop;
// it competes again when it moves away and back.
func (pt *part) Refused(err error) {
	g := pt.g
	if !errors.Is(err, session.ErrLockDelay) || g.delayReported {
		return
	}
	g.delayReported = true
	g.report(fmt.Errorf("simba: group %q: partition %d: %w", g.name, pt.p, err))
}

// Won is called by the session when a term of the partition begins.
func (pt *part) Won(t *term.Term) {
	pt.g.delayReported = false // a later refusal is news again
	g := pt.g
	if !pt.want || g.leaving != nil || g.closed {
		// The assignment moved on while the attempt was in flight.
		pt.c.Release(term.SteppedDown, nil)
		return
	}
	ts := &termState{t: t}
	pt.term, pt.ts, pt.running = t, ts, 0
	// The tasks start now, not behind the group's serial callback queue:
	// one slow OnAssigned of another partition must not keep this one's
	// work waiting (ADR 0101, 0192). OnAssigned follows in order.
	pt.startTasks(t)
	g.eng.Defer(func() {
		g.queue.Push(func() {
			g.listener.OnAssigned(pt.p, t)
		}, func(err error) {
			ts.refused.Store(true)
			pt.refused(t, err)
		})
	})
}

// refused handles an executor that refused OnAssigned: the listener never
// learned of the term, so its OnRevoked is not delivered; the partition is
// handed over (its tasks, started with the term, cancelled and waited
// for) and not taken again for one lease duration.
func (pt *part) refused(t *term.Term, err error) {
	g := pt.g
	g.eng.Do(func() {
		g.report(err)
		if pt.term != t {
			return
		}
		pt.coolUntil = g.eng.Now().Add(g.s.Config().LeaseDuration)
		pt.unwant(term.SteppedDown)
	})
}

// Lost is called by the session when a term ends involuntarily (or the
// session closed).
func (pt *part) Lost(t *term.Term, reason term.RevokeReason) {
	if h := pt.hand; h != nil && h.t == t {
		h.done() // the lease is gone: nothing left to release
		return
	}
	if pt.term != t {
		return
	}
	pt.term = nil
	pt.revoked(pt.ts, reason)
	pt.maybeDrop()
}

// Closed is called by the session when it closes.
func (pt *part) Closed() { pt.want = false }

// GroupLease marks the partition's lease as a group's own, which the
// session lets only a group claim (ADR 0191).
func (*part) GroupLease() {}

// Describe reports the partition in the session's Snapshot.
func (pt *part) Describe() (kind, status string) {
	switch {
	case pt.hand != nil:
		return "group-partition", "RELEASING"
	case pt.term != nil:
		return "group-partition", "OWNER"
	case pt.want:
		return "group-partition", "CANDIDATE"
	}
	return "group-partition", "IDLE"
}

// revoked queues OnRevoked, unless OnAssigned was refused. Lock held.
//
// An executor that accepted OnAssigned and refuses its OnRevoked would leave
// the listener believing it still owns the partition: the refused OnRevoked
// runs instead on the goroutine delivering it, in its place in the queue, as
// election does, so callbacks stay paired and ordered.
func (pt *part) revoked(ts *termState, reason term.RevokeReason) {
	g := pt.g
	run := func() {
		if !ts.refused.Load() {
			g.listener.OnRevoked(pt.p, ts.t, reason)
		}
	}
	g.eng.Defer(func() {
		g.queue.PushMustRun(run)
	})
}

// unwant stops competing for the partition and hands its term over, if it
// holds one, in the handover order: revoke, wait for the tasks (at most the
// term's remaining time), release with the token, then OnRevoked. Lock
// held.
func (pt *part) unwant(reason term.RevokeReason) {
	pt.want = false
	if pt.c == nil {
		return // being registered: claim drops it
	}
	pt.c.Want(false)
	t := pt.term
	if pt.hand != nil || t == nil {
		pt.maybeDrop()
		return
	}
	g := pt.g
	bound := t.Remaining()
	ts := pt.ts
	pt.term = nil
	pt.c.Revoke(reason)
	h := &handover{t: t}
	pt.hand = h
	g.handovers++
	h.done = func() {
		if h.completed {
			return
		}
		h.completed = true
		if h.bound != nil {
			h.bound()
		}
		after := func() {
			pt.hand = nil
			pt.revoked(ts, reason)
			g.handovers--
			if pt.want && pt.c != nil && !g.closed && g.leaving == nil {
				pt.c.Want(true) // assigned back during the handover
			} else {
				pt.maybeDrop()
			}
			g.checkLeft()
		}
		if pt.c.Term() == t {
			pt.c.Release(reason, after)
		} else {
			after() // the lease is gone already
		}
	}
	if pt.running == 0 || bound <= 0 {
		h.done()
		return
	}
	h.bound = g.eng.AfterFunc(bound, func() { g.eng.Do(h.done) })
}

// maybeDrop unregisters the claim of a partition that is idle, so a
// member's session carries claims only for what it owns or wants. Lock
// held.
func (pt *part) maybeDrop() {
	if pt.c == nil || pt.want || pt.hand != nil || pt.term != nil {
		return
	}
	pt.c.Drop()
	pt.c = nil
}

// startTasks starts the group's tasks for t, unless t has already ended.
// Lock held.
func (pt *part) startTasks(t *term.Term) {
	g := pt.g
	if pt.term != t || !t.Valid() {
		return
	}
	for _, task := range g.tasks {
		pt.running++
		g.spawn(pt.p, t, task, func() {
			g.eng.Do(func() {
				if pt.term == t || pt.hand != nil && pt.hand.t == t {
					pt.running--
					if pt.running == 0 && pt.hand != nil && pt.hand.t == t {
						pt.hand.done()
					}
				}
			})
		})
	}
}
