package group_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/term"
)

// StepDown: the member hands every partition over in order (its task
// returns before the next owner's OnAssigned), owns nothing and is not
// counted for the cooldown while the others share everything fairly, then
// takes its share back.
func TestStepDownHandsOverAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		const n = 12
		var mu sync.Mutex
		var events []string
		note := func(format string, args ...any) {
			mu.Lock()
			events = append(events, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		// a's task ignores cancellation for a second: the handover waits.
		aTask := group.RunWhileOwner(func(ctx context.Context, p int, _ *term.Term) error {
			<-ctx.Done()
			time.Sleep(time.Second)
			note("a task %d returned", p)
			return nil
		})
		a := join(t, openSession(t, b), "a", n, r, aTask)
		others := func(id string) group.Option {
			l := r.listener(id)
			return group.WithListener(group.Funcs{
				Assigned: func(p int, tm *term.Term) { l.OnAssigned(p, tm); note("%s assigned %d", id, p) },
				Revoked:  l.OnRevoked,
			})
		}
		bb := join(t, openSession(t, b), "b", n, nil, others("b"))
		c := join(t, openSession(t, b), "c", n, nil, others("c"))
		advance(settle)
		owned(t, n, a, bb, c)
		mine := a.Terms()

		const cooldown = time.Minute
		mu.Lock()
		mark := len(events)
		mu.Unlock()
		start := time.Now()
		if err := a.StepDown(context.Background(), cooldown); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < time.Second {
			t.Fatalf("StepDown returned after %v, before a's tasks returned (1s)", took)
		}
		if snap := a.Snapshot(); snap.Status != "COOLDOWN" || len(snap.Owned) != 0 || len(a.Terms()) != 0 {
			t.Fatalf("after StepDown: %+v, terms %v", snap, a.Terms())
		}
		for _, tm := range mine {
			if tm.Valid() {
				t.Fatalf("a term of a is still valid after StepDown: %v", tm)
			}
		}
		advance(settle)
		owned(t, n, bb, c) // a is not counted: b and c share all 12
		if len(a.Terms()) != 0 {
			t.Fatalf("a owns %d partitions during its cooldown", len(a.Terms()))
		}
		// The handover order, per partition a gave up: a's task returned
		// before the next owner's OnAssigned.
		mu.Lock()
		after := events[mark:]
		for p := range mine {
			returned, assigned := -1, -1
			for i, e := range after {
				if e == fmt.Sprintf("a task %d returned", p) && returned < 0 {
					returned = i
				}
				if (e == fmt.Sprintf("b assigned %d", p) || e == fmt.Sprintf("c assigned %d", p)) && assigned < 0 {
					assigned = i
				}
			}
			if returned < 0 || assigned < 0 || assigned < returned {
				t.Errorf("partition %d: a's task returned at %d, the next owner's OnAssigned at %d; want both, in that order (%v)", p, returned, assigned, after)
			}
		}
		mu.Unlock()

		// The cooldown ends: a joins again and takes its share back.
		advance(cooldown)
		advance(settle)
		owned(t, n, a, bb, c)
		if s := a.Snapshot().Status; s != "MEMBER" {
			t.Fatalf("status after the cooldown = %s, want MEMBER", s)
		}
		r.check(t)
		for _, g := range []*group.Group{a, bb, c} {
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
		}
		r.check(t)
		if k := r.openCount(); k != 0 {
			t.Fatalf("%d partitions without OnRevoked after Close", k)
		}
	})
}

// The OnRevoked of a step down says STEPPED_DOWN, and comes after the
// partition's task returned.
func TestStepDownRevokesWithSteppedDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var reasons []term.RevokeReason
		var mu sync.Mutex
		var returned atomic.Int32
		g, err := group.Join(openSession(t, b), "orders", 3,
			group.RunWhileOwner(func(ctx context.Context, _ int, _ *term.Term) error {
				<-ctx.Done()
				returned.Add(1)
				return nil
			}),
			group.WithListener(group.Funcs{Revoked: func(_ int, _ *term.Term, reason term.RevokeReason) {
				mu.Lock()
				defer mu.Unlock()
				if returned.Load() == 0 {
					t.Error("OnRevoked before any task returned")
				}
				reasons = append(reasons, reason)
			}}))
		if err != nil {
			t.Fatal(err)
		}
		advance(settle)
		if err := g.StepDown(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reasons) != 3 {
			t.Fatalf("%d OnRevoked after StepDown, want 3", len(reasons))
		}
		for _, r := range reasons {
			if r != term.SteppedDown {
				t.Fatalf("OnRevoked reason %v, want STEPPED_DOWN", r)
			}
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// A lone member that steps down leaves its partitions unowned for the
// cooldown (there is nobody to take them) and takes them back after it;
// StepDown again restarts the cooldown; Leave during a cooldown completes
// at once; StepDown after Leave fails with ErrLeft.
func TestStepDownCooldownAndLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		g := join(t, openSession(t, b), "a", 4, r)
		advance(settle)
		if len(g.Terms()) != 4 {
			t.Fatalf("a alone owns %d of 4", len(g.Terms()))
		}
		if err := g.StepDown(context.Background(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		advance(20 * time.Second)
		if err := g.StepDown(context.Background(), 30*time.Second); err != nil { // restarts the cooldown
			t.Fatal(err)
		}
		advance(20 * time.Second) // 40s after the first: still cooling
		if len(g.Terms()) != 0 || g.Snapshot().Status != "COOLDOWN" {
			t.Fatalf("20s into the second cooldown: %+v", g.Snapshot())
		}
		advance(10*time.Second + settle)
		if len(g.Terms()) != 4 {
			t.Fatalf("after the cooldown a owns %d of 4", len(g.Terms()))
		}
		if err := g.StepDown(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := g.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := g.StepDown(context.Background(), time.Second); !errors.Is(err, group.ErrLeft) {
			t.Fatalf("StepDown after Leave = %v, want ErrLeft", err)
		}
		r.check(t)
		if k := r.openCount(); k != 0 {
			t.Fatalf("%d partitions without OnRevoked after Leave", k)
		}
	})
}

func TestStepDownFromCallbackDoesNotDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		errc := make(chan error, 1)
		var self atomic.Pointer[group.Group]
		var once sync.Once
		ready := make(chan struct{})
		g, err := group.Join(openSession(t, b), "orders", 3, group.WithListener(group.Funcs{Assigned: func(int, *term.Term) {
			<-ready
			once.Do(func() { errc <- self.Load().StepDown(context.Background(), time.Minute) })
		}}))
		if err != nil {
			t.Fatal(err)
		}
		self.Store(g)
		close(ready)
		advance(settle)
		if err := <-errc; !errors.Is(err, group.ErrWouldBlockSelf) {
			t.Fatalf("StepDown from OnAssigned = %v, want ErrWouldBlockSelf", err)
		}
		advance(settle)
		if len(g.Terms()) != 0 {
			t.Fatalf("%d partitions owned during the cooldown a callback started", len(g.Terms()))
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
