package election

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/simba-go/simba/internal/layer"
)

// Executor runs callbacks. Execute may refuse a callback by returning an
// error (a saturated pool, a shutting-down runtime). A refused OnElected
// does not run (the election steps down, and that term's OnRevoked is not
// delivered either); a refused OnRevoked of a term whose OnElected ran is
// run anyway, on the goroutine delivering it, so that the listener always
// learns that its term ended.
type Executor interface {
	Execute(f func()) error
}

// ExecutorFunc adapts a function to an Executor.
type ExecutorFunc func(f func()) error

// Execute calls fn(f).
func (fn ExecutorFunc) Execute(f func()) error { return fn(f) }

// Direct is an Executor that runs callbacks on the goroutine that delivers
// them: the engine's. Callbacks must then not block; to wait for a Stop or
// StepDown, chain on what they return instead of blocking.
type Direct struct{}

// Execute runs f at once.
func (Direct) Execute(f func()) error { f(); return nil }

// Goroutines is the default Executor: each callback runs on a new
// goroutine (one at a time per election, by the serial queue).
type Goroutines struct{}

// Execute runs f on a new goroutine.
func (Goroutines) Execute(f func()) error { go f(); return nil }

// ErrRefused wraps an executor's refusal.
var ErrRefused = errors.New("simba: executor refused the callback")

// serial runs one election's callbacks one at a time, in order, over its
// executor, with no engine lock held. An item whose run is refused by the
// executor is skipped and its refused function called instead.
type serial struct {
	eng   layer.Engine
	exec  Executor
	owner layer.Claim // the election's claim: whose callbacks these are
	quiet bool        // no user listener: callbacks run nothing of the user's

	mu      sync.Mutex
	items   []item
	running bool
	closed  bool
}

type item struct {
	run     func()
	refused func(error) // nil: an internal step, run directly
}

// push appends it; it runs after everything pushed before it. After close,
// pushes are dropped: nothing is delivered after Stop completes.
func (q *serial) push(it item) {
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
// executor (whose completion calls next again).
func (q *serial) next() {
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
		_, loop := q.exec.(Direct)
		err := q.exec.Execute(func() {
			defer release()
			q.inside(loop, it.run)
			if handoff.CompareAndSwap(0, 2) {
				return
			}
			q.next()
		})
		if err != nil {
			release()
			it.refused(errors.Join(ErrRefused, err))
			continue
		}
		if handoff.CompareAndSwap(0, 1) {
			return
		}
	}
}

// whenIdle runs f once every item pushed so far has run.
func (q *serial) whenIdle(f func()) {
	q.push(item{run: f})
}

// close drops everything pushed from now on.
func (q *serial) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// inside runs a callback marked as the election's, so that a blocking call
// without a context made from it does not wait for itself; loop says it
// runs on the session's delivery loop (a Direct executor, or a refused
// OnRevoked run in place). Callbacks of an election without a user listener
// run unmarked: nothing in them can wait.
func (q *serial) inside(loop bool, f func()) {
	if q.quiet {
		f()
		return
	}
	q.eng.Inside(q.owner, loop, f)
}
