package zksimba

import (
	"sync"
	"sync/atomic"

	"github.com/simba-go/simba/session/driver"
)

// maxQueued bounds the notices waiting for delivery. Beyond it the queue is
// replaced by one empty notice ("notices may have been lost"), which makes
// every waiting candidate attempt: a notice is only a hint.
const maxQueued = 4096

// notifier queues notices posted from go-zookeeper's receive loop (which
// must never wait for user code: it also carries renewal replies) and
// delivers them on a goroutine of its own, running while anyone
// subscribes.
type notifier struct {
	mu      sync.Mutex
	subs    map[int]*subscriber
	next    int
	queue   []driver.Notice
	wake    chan struct{} // cap 1: the running loop has something to do
	quit    chan struct{} // closed to stop the loop; nil when not running
	done    chan struct{} // closed when the loop has returned
	shut    bool          // shutdown: no more subscriptions
	loopGID atomic.Uint64 // the loop's goroutine id, while it runs

	delivering sync.Mutex // held while one notice is being delivered
}

type subscriber struct {
	fn      func(driver.Notice)
	stopped atomic.Bool
}

// subscribe adds fn and starts the loop if needed. After shutdown, fn is
// never called.
func (n *notifier) subscribe(fn func(driver.Notice)) (stop func()) {
	sub := &subscriber{fn: fn}
	n.mu.Lock()
	if n.shut {
		n.mu.Unlock()
		return func() {}
	}
	if n.subs == nil {
		n.subs = make(map[int]*subscriber)
	}
	id := n.next
	n.next++
	n.subs[id] = sub
	if n.quit == nil {
		// Each loop has its own channels, so a loop that is ending (its
		// last subscription stopped from inside it) never takes the next
		// loop's wake-ups.
		n.quit, n.done, n.wake = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
		go n.loop(n.quit, n.done, n.wake)
	}
	n.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { n.unsubscribe(id, sub) }) }
}

// unsubscribe stops sub: from the loop itself (fn stopping a
// subscription) at once; from elsewhere after any delivery in progress, so
// fn is never called once stop has returned. The last subscription stops
// the loop.
func (n *notifier) unsubscribe(id int, sub *subscriber) {
	sub.stopped.Store(true)
	inLoop := n.loopGID.Load() == goid()
	n.mu.Lock()
	delete(n.subs, id)
	var quit, done chan struct{}
	if len(n.subs) == 0 && n.quit != nil {
		quit, done = n.quit, n.done
		n.quit, n.done, n.queue = nil, nil, nil
	}
	n.mu.Unlock()
	if quit != nil {
		close(quit)
	}
	if inLoop {
		return
	}
	n.waitDelivery()
	if done != nil {
		<-done
	}
}

// waitDelivery returns once no notice is being delivered.
func (n *notifier) waitDelivery() {
	n.delivering.Lock()
	defer n.delivering.Unlock() // taken only to wait for the holder
}

// post queues a notice without waiting.
func (n *notifier) post(x driver.Notice) {
	n.mu.Lock()
	if n.quit == nil {
		n.mu.Unlock()
		return // nobody listens
	}
	if len(n.queue) >= maxQueued {
		n.queue = append(n.queue[:0], driver.Notice{})
	} else {
		n.queue = append(n.queue, x)
	}
	wake := n.wake
	n.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

func (n *notifier) loop(quit, done, wake chan struct{}) {
	defer close(done)
	n.loopGID.Store(goid())
	defer n.loopGID.Store(0)
	for {
		select {
		case <-quit:
			return
		case <-wake:
		}
		for {
			n.mu.Lock()
			q := n.queue
			n.queue = nil
			n.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, x := range q {
				select {
				case <-quit:
					return
				default:
				}
				n.deliver(x)
			}
		}
	}
}

func (n *notifier) deliver(x driver.Notice) {
	n.delivering.Lock()
	defer n.delivering.Unlock()
	n.mu.Lock()
	subs := make([]*subscriber, 0, len(n.subs))
	for _, s := range n.subs {
		subs = append(subs, s)
	}
	n.mu.Unlock()
	for _, s := range subs {
		if !s.stopped.Load() { // fn may have stopped a later one
			s.fn(x)
		}
	}
}

// shutdown stops delivery for good; the loop ends after the delivery in
// progress, if any, and closes the returned channel (nil: no loop ran).
func (n *notifier) shutdown() (done <-chan struct{}) {
	n.mu.Lock()
	n.shut = true
	for _, s := range n.subs {
		s.stopped.Store(true)
	}
	clear(n.subs)
	quit, loopDone := n.quit, n.done
	n.quit, n.done, n.queue = nil, nil, nil
	n.mu.Unlock()
	if quit == nil {
		return nil
	}
	close(quit)
	return loopDone
}
