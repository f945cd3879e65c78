package memory

import (
	"sync"

	"github.com/simba-go/simba/session"
)

type subscriber struct {
	// turn is a one-slot semaphore held while fn runs, so stop can wait for
	// it. A channel, not a mutex, so that a goroutine waiting in stop counts
	// as durably blocked under testing/synctest.
	turn    chan struct{}
	fn      func(session.Notice)
	stopped bool // guarded by turn
}

// Subscribe delivers a [session.Notice] to fn for every lease of the
// namespace that is released, closed with its session, or freed by an
// expiry the backend notices, and an empty Notice after [Backend.LoseData].
// fn is called synchronously by the goroutine whose call freed the lease,
// after the backend has unlocked, one notice at a time; it must not block
// and must not call stop. stop returns once fn will not be called again.
func (b *Backend) Subscribe(fn func(session.Notice)) (stop func(), err error) {
	sub := &subscriber{turn: make(chan struct{}, 1), fn: fn}
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
			sub.turn <- struct{}{}
			sub.stopped = true
			<-sub.turn
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
	subs := s.subs // copied on write by stop, so safe to range unlocked
	s.subMu.Unlock()
	for _, sub := range subs {
		for _, name := range names {
			sub.deliver(session.Notice{Name: name})
		}
	}
}

func (sub *subscriber) deliver(n session.Notice) {
	sub.turn <- struct{}{}
	defer func() { <-sub.turn }()
	if !sub.stopped {
		sub.fn(n)
	}
}
