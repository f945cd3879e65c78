package memory

import (
	"sync"

	"github.com/simba-go/simba/session/driver"
)

// subscriber delivers notices to fn one at a time. A notice that arrives
// while fn is running (from another goroutine, or from fn itself calling the
// backend) is queued and delivered by the goroutine already delivering, so
// fn never runs twice at once and a re-entrant call cannot deadlock.
type subscriber struct {
	fn func(driver.Notice)

	mu         sync.Mutex // never held while fn runs
	queue      []driver.Notice
	delivering bool
	stopped    bool
	idle       chan struct{} // closed when delivery stops, if stop waits
}

// Subscribe delivers a [driver.Notice] to fn for every lease of the
// namespace that is released, closed with its session, or freed by an
// expiry the backend notices, and an empty Notice after [Backend.LoseData].
// fn is called by the goroutine whose call freed the lease, after the
// backend has unlocked (or by the goroutine already delivering to fn), one
// notice at a time and in order. It must not block, and must not call stop.
// stop returns once fn will not be called again.
func (b *Backend) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	sub := &subscriber{fn: fn}
	s := b.s
	s.subMu.Lock()
	s.subs = append(s.subs, sub)
	s.subMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.subMu.Lock()
			for i, x := range s.subs {
				if x == sub {
					s.subs = append(s.subs[:i:i], s.subs[i+1:]...)
					break
				}
			}
			s.subMu.Unlock()
			sub.stop()
		})
	}, nil
}

// notify delivers one notice per name to every subscriber. The store must
// not be locked: a subscriber may call the backend.
func (s *store) notify(names []string) {
	if len(names) == 0 {
		return
	}
	s.subMu.Lock()
	subs := s.subs // replaced, never modified in place, by stop
	s.subMu.Unlock()
	for _, sub := range subs {
		for _, name := range names {
			sub.deliver(driver.Notice{Name: name})
		}
	}
}

func (sub *subscriber) deliver(n driver.Notice) {
	sub.mu.Lock()
	if sub.stopped {
		sub.mu.Unlock()
		return
	}
	sub.queue = append(sub.queue, n)
	if sub.delivering {
		sub.mu.Unlock()
		return
	}
	sub.delivering = true
	for len(sub.queue) > 0 && !sub.stopped {
		next := sub.queue[0]
		sub.queue = sub.queue[1:]
		sub.mu.Unlock()
		sub.fn(next)
		sub.mu.Lock()
	}
	sub.delivering = false
	if sub.idle != nil {
		close(sub.idle)
		sub.idle = nil
	}
	sub.mu.Unlock()
}

// stop ends delivery and waits for a running fn to return. It waits on a
// channel, not a mutex, so that under testing/synctest a goroutine in stop
// counts as durably blocked.
func (sub *subscriber) stop() {
	sub.mu.Lock()
	sub.stopped = true
	sub.queue = nil
	if !sub.delivering {
		sub.mu.Unlock()
		return
	}
	if sub.idle == nil {
		sub.idle = make(chan struct{})
	}
	idle := sub.idle
	sub.mu.Unlock()
	<-idle
}
