// Package serial runs the callbacks of one election or group one at a
// time, in order, over the user's executor, with no engine lock held. It
// is the one implementation election and group share: the group's copy of
// it once dropped a refused OnRevoked that the election's delivered.
package serial

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/simba-go/simba/internal/layer"
)

// Executor runs callbacks; Execute may refuse one by returning an error.
// election.Executor is one.
type Executor interface {
	Execute(f func()) error
}

// Queue runs its items one at a time, in order. While an item runs on the
// executor, the session is held (Close waits for it). After Close, pushes
// are dropped: nothing is delivered once a Stop or Leave has completed.
type Queue struct {
	eng     layer.Engine
	exec    Executor
	loop    bool  // exec runs f on the calling goroutine (election.Direct): the delivery loop
	owner   any   // whose callbacks these are, for the self-wait rule (a claim or a group)
	quiet   bool  // no user listener: callbacks run nothing of the user's
	refused error // wraps an executor's refusal (election.ErrRefused)

	mu      sync.Mutex
	items   []item
	running bool
	closed  bool
}

type item struct {
	run     func()
	refused func(error) // nil: an internal step, run on the draining goroutine
}

// Config describes a Queue.
type Config struct {
	Engine   layer.Engine
	Executor Executor
	// Direct: Executor runs f on the calling goroutine (election.Direct),
	// so callbacks run on the session's delivery loop.
	Direct bool
	// Quiet: no user listener, so callbacks run unmarked (nothing in them
	// can wait).
	Quiet bool
	// ErrRefused is joined to an executor's refusal.
	ErrRefused error
}

// New returns an empty queue. Set its owner with SetOwner before the first
// push.
func New(c Config) *Queue {
	return &Queue{eng: c.Engine, exec: c.Executor, loop: c.Direct, quiet: c.Quiet, refused: c.ErrRefused}
}

// SetOwner names whose callbacks the queue runs (a claim, or a group's
// key), for Engine.Inside.
func (q *Queue) SetOwner(owner any) { q.owner = owner }

// Push queues run, a user callback, after everything pushed before it. If
// the executor refuses it, refused is called instead (on the pushing or
// draining goroutine) with the refusal joined to Config.ErrRefused.
func (q *Queue) Push(run func(), refused func(error)) {
	if refused == nil {
		refused = func(error) {}
	}
	q.push(item{run: run, refused: refused})
}

// PushMustRun queues run, a callback the listener must receive even if the
// executor refuses it (an OnRevoked whose OnAssigned or OnElected ran):
// refused, it runs in its place in the queue, on the goroutine delivering
// it, marked as on the delivery loop.
func (q *Queue) PushMustRun(run func()) {
	q.push(item{run: run, refused: func(error) { q.Inside(true, run) }})
}

// WhenIdle runs f, engine code that never waits, once everything pushed
// before it has run.
func (q *Queue) WhenIdle(f func()) { q.push(item{run: f}) }

// Close drops everything pushed from now on.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

func (q *Queue) push(it item) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, it)
	if q.running {
		q.mu.Unlock()
		return
	}
	q.running = true
	q.mu.Unlock()
	q.next()
}

// next runs items until the queue is empty or an item went to the
// executor (whose goroutine then carries on).
func (q *Queue) next() {
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items = q.items[1:]
		q.mu.Unlock()
		if it.refused == nil {
			it.run() // an internal step: engine code, never waits
			continue
		}
		// Exactly one side goes on with the queue: this loop if the item
		// finished before Execute returned (a direct executor), else the
		// goroutine that ran it.
		var handoff atomic.Int32
		release := q.eng.Hold()
		err := q.exec.Execute(func() {
			defer release()
			q.Inside(q.loop, it.run)
			if handoff.CompareAndSwap(0, 2) {
				return
			}
			q.next()
		})
		if err != nil {
			release()
			it.refused(errors.Join(q.refused, err))
			continue
		}
		if handoff.CompareAndSwap(0, 1) {
			return
		}
	}
}

// Inside runs f, a callback, marked as the owner's, so that a blocking
// call without a context made from it does not wait for itself; loop says
// it runs on the session's delivery loop. A quiet queue runs it unmarked.
func (q *Queue) Inside(loop bool, f func()) {
	if q.quiet {
		f()
		return
	}
	q.eng.Inside(q.owner, loop, f)
}
