package session

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/internal/layer"
)

// link is embedded in Session: through it, and only through it, Simba's
// own layers reach the engine hooks (layer.Of). The field and the hooks
// are unexported here, so an application's go doc shows none of them and
// its code cannot call them.
type link = layer.Link

// hooks is the layer.Engine of a session: the engine hooks that election,
// lock and group build on. It is a value type so that two hooks of the same
// session compare equal (inCallback relies on it).
type hooks struct{ s *Session }

var _ layer.Engine = hooks{}

func (h hooks) Claim(name string, ch layer.ClaimHandler) (layer.Claim, error) {
	c, err := h.s.register(name, ch)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (h hooks) Do(f func())                                   { h.s.do(f) }
func (h hooks) DoWait(ctx context.Context, f func())          { h.s.doWait(ctx, f) }
func (h hooks) DoWaitRun(ctx context.Context, r layer.Runner) { h.s.doWait(ctx, r.Run) }
func (h hooks) Defer(f func())                                { h.s.deferFn(f) }
func (h hooks) Go(owner any, f func())                        { h.s.goOwn(owner, f) }
func (h hooks) Hold() func()                                  { return h.s.hold() }
func (h hooks) Inside(owner any, loop bool, f func())         { h.s.runInside(owner, loop, f) }

func (h hooks) WaitRunning(ctx context.Context, name string, stop <-chan struct{}) {
	h.s.waitRunning(ctx, name, stop)
}

func (h hooks) WouldWaitForSelf(ctx context.Context, owner any) bool {
	return h.s.wouldWaitForSelf(ctx, owner)
}

func (h hooks) AfterFunc(d time.Duration, f func()) func() bool {
	return h.s.env.AfterFunc(d, f)
}

func (h hooks) Now() time.Time  { return h.s.env.Now() }
func (h hooks) Jitter() float64 { return h.s.env.Jitter() }

// LiveSince: since is when the state last changed (setState). Lock held.
func (h hooks) LiveSince() (since time.Time, live bool) { return h.s.since, h.s.state == Live }

// WantAll is Want(true) for every claim of cs, all registered on this
// session: the attempts of claims not yet holding a lease leave in one
// backend call (Want alone would send the first at once, and the rest in a
// second call when it returns). Lock held.
func (h hooks) WantAll(cs []layer.Claim) {
	s := h.s
	s.holdPump = true
	for _, c := range cs {
		c.(*claim).Want(true)
	}
	s.holdPump = false
	s.pumpAcquire()
}

// Call runs op through the session's Env with a timeout of one renewal
// period, then reply with the lock held: with op's results, or with
// context.DeadlineExceeded if the timeout came first (op's results are then
// never read, so a late op cannot race with reply), or at once with
// ErrClosed after Close. Close waits for it. Lock held.
func (h hooks) Call(op func(ctx context.Context) (any, error), reply func(v any, err error)) {
	s := h.s
	if s.state == Closed {
		reply(nil, fmt.Errorf("simba: %w", ErrClosed))
		return
	}
	var v any
	var err error
	s.call(func(ctx context.Context) {
		v, err = op(ctx)
	}, func(timedOut bool) {
		if timedOut {
			reply(nil, context.DeadlineExceeded)
			return
		}
		reply(v, err)
	}, nil)
}
