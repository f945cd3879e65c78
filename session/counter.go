package session

import (
	"sync"
	"sync/atomic"
)

// counter is what Close waits for: the session's goroutines, armed timers,
// calls in flight, callbacks held and effects pending. It is a
// sync.WaitGroup without the WaitGroup's rule that an Add from zero must not
// race with a Wait: an application may well call the session (a Stop
// whose effects are deferred, each pending batch one Add) while another
// goroutine's Close waits, and a WaitGroup then panics ("reused before
// previous Wait has returned") if the Add lands as the count reaches zero.
// Here Wait returns once it has seen the count at zero; a later Add is
// simply a new count.
type counter struct {
	n       atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	zero    sync.Cond // on mu: n reached zero while someone waited
}

// Add adds d, which may be negative; the count must not go below zero.
func (c *counter) Add(d int) {
	v := c.n.Add(int64(d))
	switch {
	case v < 0:
		panic("simba: session counter below zero")
	case v == 0 && c.waiters.Load() > 0:
		// Wait counted itself a waiter before it read n: it sees zero,
		// or it is waiting on zero, which mu orders after its read.
		c.mu.Lock()
		c.zero.Broadcast()
		c.mu.Unlock()
	}
}

// Done is Add(-1).
func (c *counter) Done() { c.Add(-1) }

// Wait blocks until the count is zero.
func (c *counter) Wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.zero.L == nil {
		c.zero.L = &c.mu
	}
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	for c.n.Load() > 0 {
		c.zero.Wait()
	}
}
