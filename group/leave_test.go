package group_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/term"
)

// Leave releases the member record before it hands the partitions over:
// while the leaver's tasks are still returning (its partitions' leases
// kept for them), the other members already stop counting it, so they
// aim at its partitions at once instead of one handover later. Killed by
// the mutation group-leave-keeps-member-record.
func TestLeaveReleasesTheMemberRecordBeforeTheHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		const n = 12
		release := make(chan struct{})
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		var hold atomic.Bool
		var running atomic.Int32
		// Once a leaves, its tasks ignore cancellation until the test lets
		// them return (before that, they hand over at once for the
		// rebalance as b and c join).
		aTask := group.RunWhileOwner(func(ctx context.Context, _ int, _ *term.Term) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			if hold.Load() {
				<-release
			}
			return nil
		})
		a := join(t, openSession(t, b), "a", n, r, aTask)
		bb := join(t, openSession(t, b), "b", n, r)
		c := join(t, openSession(t, b), "c", n, r)
		// After the sessions' cleanups were registered, so it runs before
		// them: a failed check must not leave the tasks blocked.
		t.Cleanup(let)
		advance(settle)
		mine := owned(t, n, a, bb, c)[0]
		for _, g := range []*group.Group{bb, c} {
			if m := g.Snapshot().Members; !slices.Equal(m, []string{"a", "b", "c"}) {
				t.Fatalf("%s sees members %v before the Leave, want [a b c]", g.MemberID(), m)
			}
		}

		hold.Store(true)
		left := make(chan error, 1)
		go func() { left <- a.Leave(context.Background()) }()
		// One candidate tick (at most RenewInterval/2 + RetryJitter = 5s):
		// b and c have each polled once. a's handovers are still waiting
		// for its tasks, and for at least one more renew interval's worth
		// of the term's remaining time (lease 15s, renewed every 5s).
		advance(5*time.Second + 500*time.Millisecond)
		if k := int(running.Load()); k != mine {
			t.Fatalf("%d of a's %d tasks still running one tick into the Leave, want all", k, mine)
		}
		select {
		case err := <-left:
			t.Fatalf("Leave returned (%v) while a's tasks were still running", err)
		default:
		}
		if s := a.Snapshot().Status; s != "LEAVING" {
			t.Fatalf("a's status during its handovers = %s, want LEAVING", s)
		}
		for _, g := range []*group.Group{bb, c} {
			if m := g.Snapshot().Members; !slices.Equal(m, []string{"b", "c"}) {
				t.Fatalf("%s still sees members %v while a's tasks return, want [b c]: Leave must release the member record before the handovers", g.MemberID(), m)
			}
		}

		let()
		if err := <-left; err != nil {
			t.Fatal(err)
		}
		advance(settle)
		owned(t, n, bb, c)
		r.check(t)
	})
}
