package group

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/simba-go/simba/internal/layer"

	"github.com/simba-go/simba/election"
)

// serial runs a member's callbacks one at a time, in order, over its
// executor, with no engine lock held, holding the session (Close waits for
// a callback queued or running). A refused item is skipped and its refused
// function called instead. After shut, pushes are dropped: nothing is
// delivered once Leave has completed.
type serial struct {
	eng   layer.Engine
	exec  election.Executor
	owner any // the group: whose callbacks these are, for self-waits

	mu      sync.Mutex
	items   []item
	running bool
	shut    bool
}

type item struct {
	run     func()
	refused func(error) // nil: an internal step, run on the draining goroutine
}

func (q *serial) push(it item) {
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, it)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		q.drain()
	}
}

// drain runs items until the queue is empty or one went to the executor,
// whose goroutine then carries on (exactly one side does: see turn).
func (q *serial) drain() {
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
		var turn atomic.Int32 // 1: the executor returned first; 2: the item finished first
		release := q.eng.Hold()
		_, loop := q.exec.(election.Direct)
		err := q.exec.Execute(func() {
			defer release()
			q.eng.Inside(q.owner, loop, it.run)
			if !turn.CompareAndSwap(0, 2) {
				q.drain()
			}
		})
		if err != nil {
			release()
			it.refused(errors.Join(election.ErrRefused, err))
			continue
		}
		if !turn.CompareAndSwap(0, 1) {
			continue
		}
		return
	}
}

// whenIdle runs f once everything pushed before it has run.
func (q *serial) whenIdle(f func()) { q.push(item{run: f}) }

func (q *serial) close() {
	q.mu.Lock()
	q.shut = true
	q.mu.Unlock()
}
