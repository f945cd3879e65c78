package session

import (
	"context"
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

func (h hooks) Do(f func())                         { h.s.do(f) }
func (h hooks) Defer(f func())                      { h.s.deferFn(f) }
func (h hooks) Go(f func())                         { h.s.goOwn(f) }
func (h hooks) Hold() func()                        { return h.s.hold() }
func (h hooks) Inside(f func())                     { h.s.runInside(f) }
func (h hooks) InCallback(ctx context.Context) bool { return h.s.inCallback(ctx) }

func (h hooks) AfterFunc(d time.Duration, f func()) func() bool {
	return h.s.env.AfterFunc(d, f)
}
