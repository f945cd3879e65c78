package fxsimba_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/term"
)

// Two nodes run the same partitioned job: they share the partitions; when
// one stops, each of its partitions is handed over in order (its task
// returns before the other node's task starts on it).
func TestPartitionedJobSharesAndHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		var l log
		node := func(name string) *fxtest.App {
			return fxtest.New(t, fx.Provide(fxsimba.Module), backend(b.NewClient()), env(nil), quiet(),
				fxsimba.PartitionedJob("orders", 4, func(ctx context.Context, p int, tm *term.Term) error {
					l.add("%s start %d", name, p)
					<-ctx.Done()
					<-time.After(time.Second)
					l.add("%s end %d", name, p)
					return nil
				}))
		}
		a := node("a")
		a.RequireStart()
		<-time.After(12 * time.Second)
		synctest.Wait()
		bb := node("b")
		bb.RequireStart()
		<-time.After(12 * time.Second)
		synctest.Wait()
		starts := map[string]int{}
		for _, line := range l.get() {
			if f := strings.Fields(line); f[1] == "start" {
				starts[f[0]]++
			}
		}
		if starts["a"] != 4 || starts["b"] != 2 {
			t.Fatalf("starts = %v, want a on all 4 then b on 2: %q", starts, l.get())
		}
		a.RequireStop()
		<-time.After(12 * time.Second)
		synctest.Wait()
		got := l.get()
		for p := range 4 {
			aEnd, bStart := -1, -1
			for i, x := range got {
				switch {
				case x == fmt.Sprintf("a end %d", p):
					aEnd = i
				case x == fmt.Sprintf("b start %d", p) && aEnd >= 0:
					bStart = i
				}
			}
			if aEnd < 0 || bStart < 0 {
				t.Fatalf("partition %d: want a's task to end, then b's to start: %q", p, got)
			}
		}
		bb.RequireStop()
	})
}

func TestInvalidPartitionedJobFailsNew(t *testing.T) {
	app := fx.New(fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(),
		fxsimba.PartitionedJob("bad:name", 4, func(context.Context, int, *term.Term) error { return nil }), fx.NopLogger)
	if err := app.Err(); !errors.Is(err, fxsimba.ErrInvalidJob) {
		t.Fatalf("fx.New with an invalid group name = %v, want ErrInvalidJob", err)
	}
	app = fx.New(fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(), fxsimba.PartitionedJob("ok", 4, nil), fx.NopLogger)
	if err := app.Err(); !errors.Is(err, fxsimba.ErrInvalidJob) {
		t.Fatalf("fx.New with a nil task = %v, want ErrInvalidJob", err)
	}
}
