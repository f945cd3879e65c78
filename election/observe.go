package election

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/internal/layer"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
)

// LeaderOf reports who holds name now, without campaigning: the holder, and
// false if nobody does. It asks the backend through the session's
// inspection (session.Session.Inspect), so it fails with an error wrapping
// session.ErrNoInspector on a backend that cannot inspect, and wrapping
// deadline.ErrInvalidName for an invalid name. The answer is informative
// only: by the time it arrives the lease may have changed hands; only a
// term of one's own is proof of leadership.
func LeaderOf(ctx context.Context, s *session.Session, name string) (session.Holder, bool, error) {
	if err := deadline.ValidateName(name); err != nil {
		return session.Holder{}, false, fmt.Errorf("simba: leader of %q: %w", name, err)
	}
	hs, err := s.Inspect(ctx, session.InspectRequest{Names: []string{name}})
	if err != nil {
		return session.Holder{}, false, fmt.Errorf("simba: leader of %q: %w", name, err)
	}
	for _, h := range hs {
		if h.Name == name {
			return h, true, nil
		}
	}
	return session.Holder{}, false, nil
}

// Observation is the holder of an observed name after a change.
type Observation struct {
	Name string
	// Held is false when nobody holds the name.
	Held bool
	// Holder is the holder when Held (its session, owner identity, token
	// and remaining time as the backend saw them).
	Holder session.Holder
}

// changed reports whether o says something different from prev about who
// holds the name: another term (token), another session, or none.
func (o Observation) changed(prev Observation) bool {
	if o.Held != prev.Held {
		return true
	}
	return o.Held && (o.Holder.Token != prev.Holder.Token || o.Holder.Session != prev.Holder.Session ||
		o.Holder.Owner.Identity != prev.Holder.Owner.Identity)
}

// An ObserveOption configures [Observe].
type ObserveOption func(*observeOptions)

type observeOptions struct{ every time.Duration }

// PollEvery sets how often Observe asks the backend (default: the session's
// renewal period). Release notices make it ask at once in between.
func PollEvery(d time.Duration) ObserveOption {
	return func(o *observeOptions) {
		if d > 0 {
			o.every = d
		}
	}
}

// Observe watches who holds name without campaigning. The returned channel
// receives the current holder (or none) first, then every change of holder:
// a new term, another session or owner, or nobody. It looks again at once
// when the backend pushes a release notice and polls otherwise, so a
// change can go unseen for up to the poll period, and a holder that came
// and went between two looks is never reported. A backend may push only
// the releases a candidate waits for (Redis and PostgreSQL announce a
// release only when an Acquire was refused the name since its last notice,
// ADR 0147 and 0162), so the step-down of a holder nobody competes with is
// seen at the next poll.
// Changes are not queued for a slow reader: it gets the state current when
// it reads next. A failed look is retried at the next poll, the last
// observation standing meanwhile. The channel is closed when ctx ends or
// the session closes.
//
// Observe fails at once, like [LeaderOf], for an invalid name or a backend
// that cannot inspect.
func Observe(ctx context.Context, s *session.Session, name string, opts ...ObserveOption) (<-chan Observation, error) {
	o := observeOptions{every: s.Config().RenewInterval}
	for _, opt := range opts {
		opt(&o)
	}
	first, err := observe(ctx, s, name)
	if err != nil {
		return nil, err
	}
	out := make(chan Observation)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	stopNotices, _ := s.WatchNotices(func(n session.Notice) {
		if n.Name == name || n.Name == "" {
			poke()
		}
	})
	go func() {
		defer close(out)
		defer stopNotices()
		cur, pending := first, true
		for {
			var send chan<- Observation
			if pending {
				send = out
			}
			tick, stopTick := timerOn(s, o.every)
			select {
			case send <- cur:
				pending = false
				stopTick()
				continue
			case <-ctx.Done():
				stopTick()
				return
			case <-s.Done():
				stopTick()
				return
			case <-wake:
			case <-tick:
			}
			stopTick()
			next, err := observe(ctx, s, name)
			if err != nil {
				continue // retried at the next poll or notice
			}
			if next.changed(cur) {
				pending = true
			}
			cur = next
		}
	}()
	return out, nil
}

func observe(ctx context.Context, s *session.Session, name string) (Observation, error) {
	h, ok, err := LeaderOf(ctx, s, name)
	return Observation{Name: name, Held: ok, Holder: h}, err
}

// timerOn returns a channel closed d from now on the session's clock.
func timerOn(s *session.Session, d time.Duration) (<-chan struct{}, func() bool) {
	ch := make(chan struct{})
	if eng, ok := layer.Of(s); ok {
		return ch, eng.AfterFunc(d, func() { close(ch) })
	}
	return ch, time.AfterFunc(d, func() { close(ch) }).Stop
}
