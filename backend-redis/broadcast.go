package redissimba

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// healthCheck is how often an idle subscription pings Redis; go-redis
// reconnects and subscribes again when a ping goes unanswered, and the
// fresh subscription becomes an empty Notice.
const healthCheck = time.Second

// subscription is the one pub/sub connection a Backend keeps for its
// namespace, shared by every Subscribe caller.
type subscription struct {
	ps   *redis.PubSub
	done chan struct{} // closed when the delivery loop has returned
	loop uint64        // goroutine id of the delivery loop

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a call of fn returns
	subs    map[uint64]func(driver.Notice)
	calling uint64 // subscriber whose fn runs now, 0 if none
}

// Subscribe delivers release notices of the namespace to fn until stop is
// called. All subscribers of one Backend share one Redis subscription. A
// release or close publishes a name only when an Acquire (of any process)
// was refused it since its last notice (ADR 0147): watchers of a name
// nobody competes for learn of its release by polling.
// Every time the subscription is established again after a lost
// connection, fn receives a Notice with an empty Name, since notices may
// have been missed meanwhile.
//
// fn must not block. stop waits until fn will not be called again; called
// from fn itself, it returns at once (fn is then not called again after it
// returns). Subscribe waits up to the subscribe timeout (see
// [WithSubscribeTimeout]) for Redis to confirm the subscription; if Redis
// cannot be reached by then, Subscribe still succeeds, the subscription is
// retried in the background, and fn receives an empty Notice once it is
// established. It returns an error only when Redis refuses the
// subscription or the client is closed.
func (b *Backend) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	if fn == nil {
		return nil, fmt.Errorf("redissimba: subscribe: nil func")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return nil, errShut
	}
	if b.sub == nil {
		s, err := b.startSubscription()
		if err != nil {
			return nil, err
		}
		b.sub = s
	}
	b.next++
	s, id := b.sub, b.next // ids start at 1: 0 means "nobody" in calling
	s.mu.Lock()
	s.subs[id] = fn
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { b.unsubscribe(s, id) }) }, nil
}

// unsubscribe removes subscriber id and waits until its fn is not running,
// unless it is called from that fn (on the delivery loop), where waiting
// would be waiting for itself: the fn then returns before the loop can
// call anything again. The last subscriber out closes the subscription.
// No lock is held while waiting, so a running fn may call the backend.
func (b *Backend) unsubscribe(s *subscription, id uint64) {
	inLoop := goid() == s.loop
	s.mu.Lock()
	delete(s.subs, id)
	for !inLoop && s.calling == id {
		s.idle.Wait()
	}
	s.mu.Unlock()

	b.mu.Lock()
	s.mu.Lock()
	last := len(s.subs) == 0 && b.sub == s
	s.mu.Unlock()
	if last {
		b.sub = nil // the next Subscribe starts a fresh subscription
	}
	b.mu.Unlock()
	if !last {
		return
	}
	_ = s.ps.Close() // closing a subscription only fails if already closed
	if !inLoop {
		<-s.done
	}
}

func (b *Backend) startSubscription() (*subscription, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.subscribeTimeout)
	defer cancel()
	ps := b.rdb.Subscribe(ctx, b.keys.channel)
	// Wait for the confirmation so that a release published after
	// Subscribe returns is seen. If Redis cannot be reached in time, carry
	// on: go-redis keeps trying in the background, and the confirmation,
	// when it comes, is delivered as an empty Notice. A session must not
	// fail to start because Redis blinked; notices are only hints. An
	// answer from Redis refusing the subscription (ACL) is an error.
	if _, err := ps.Receive(ctx); err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) || errors.Is(err, redis.ErrClosed) {
			_ = ps.Close()
			return nil, fmt.Errorf("redissimba: subscribe %s: %w", b.keys.channel, err)
		}
	}
	s := &subscription{ps: ps, done: make(chan struct{}), subs: make(map[uint64]func(driver.Notice))}
	s.idle = sync.NewCond(&s.mu)
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(healthCheck))
	started := make(chan struct{})
	go s.run(ch, started)
	<-started
	return s, nil
}

func (s *subscription) run(ch <-chan any, started chan<- struct{}) {
	defer close(s.done)
	s.loop = goid()
	close(started)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.deliver(driver.Notice{}) // subscribed again: notices may be lost
			}
		case *redis.Message:
			for _, name := range parseNotice(m.Payload) {
				s.deliver(driver.Notice{Name: name})
			}
		}
	}
}

// deliver calls every subscriber's fn in turn, without holding the lock,
// so that fn may call into the backend or stop its own subscription.
func (s *subscription) deliver(n driver.Notice) {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.subs))
	for id := range s.subs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.mu.Lock()
		fn, ok := s.subs[id] // skip subscribers stopped meanwhile
		if ok {
			s.calling = id
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		fn(n)
		s.mu.Lock()
		s.calling = 0
		s.idle.Broadcast()
		s.mu.Unlock()
	}
}

// parseNotice splits a release message (space-separated names) and keeps
// the valid names: anyone who can publish on the channel can send garbage,
// and a notice is only a hint.
func parseNotice(payload string) []string {
	names := strings.Fields(payload)
	out := names[:0]
	for _, n := range names {
		if deadline.ValidateName(n) == nil {
			out = append(out, n)
		}
	}
	return out
}
