package fxsimba_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"go.uber.org/fx"

	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/session"
)

// An fx app stopped and started again (a test harness reusing its app)
// cannot reopen its closed session: the start fails saying so and what to
// do, wrapping session.ErrClosed.
func TestStartAfterStopNamesTheRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		app := fx.New(fx.Provide(fxsimba.Module), backend(b), env(nil), quiet(), fx.NopLogger,
			fx.Invoke(func(*session.Session) {}))
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := app.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		err := app.Start(ctx)
		if !errors.Is(err, session.ErrClosed) || !strings.Contains(err.Error(), "fx.New") {
			t.Fatalf("second Start = %v, want ErrClosed saying to build a new app with fx.New", err)
		}
		_ = app.Stop(ctx)
	})
}
