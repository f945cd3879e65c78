package fxsimba_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// startedBackend counts the Opens made before its own start hook ran:
// the backend of an app whose hook creates what the backend needs (a
// schema) and must see no call before it.
type startedBackend struct {
	session.Backend
	started atomic.Bool
	early   atomic.Int32
}

func (b *startedBackend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if !b.started.Load() {
		b.early.Add(1)
	}
	return b.Backend.Open(ctx, req)
}

// The session does no I/O when fx builds it: its first Open comes after
// the backend's own start hook (issue 22, item 7). Checked on virtual time
// with the bubble idle between construction and start, so a background
// Open made at construction is always seen, whatever the scheduling.
func TestSessionDoesNoIOBeforeTheBackendsStartHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &startedBackend{Backend: newMemory(t)}
		app := fxtest.New(t,
			fx.Provide(fxsimba.Module),
			env(nil), quiet(),
			fx.Provide(func(lc fx.Lifecycle) session.Backend {
				lc.Append(fx.Hook{OnStart: func(context.Context) error { b.started.Store(true); return nil }})
				return b
			}),
			fxsimba.WhileLeader("x", func(ctx context.Context, _ *term.Term) error { <-ctx.Done(); return nil }),
		)
		synctest.Wait() // whatever the constructors started has run
		app.RequireStart()
		app.RequireStop()
		if n := b.early.Load(); n > 0 {
			t.Fatalf("%d Opens before the backend's start hook ran: the session did I/O at construction", n)
		}
	})
}
