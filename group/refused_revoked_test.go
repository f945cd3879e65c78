package group_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/group"
)

// An executor that accepted OnAssigned and then refuses OnRevoked (it is
// shutting down, say) must not lose the OnRevoked, or the listener believes
// it owns the partition forever: the refused OnRevoked runs in place, as in
// election (issue 9 defect 4). Found by review: group dropped it.
func TestRefusedOnRevokedRunsInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		var refuse atomic.Bool
		x := election.ExecutorFunc(func(f func()) error {
			if refuse.Load() {
				return errors.New("executor shut down")
			}
			go f()
			return nil
		})
		g := join(t, openSession(t, b), "a", 4, r, group.WithExecutor(x))
		advance(settle)
		if n := r.openCount(); n != 4 {
			t.Fatalf("owns %d partitions, want 4", n)
		}
		refuse.Store(true)
		if err := g.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.check(t)
		if n := r.openCount(); n != 0 {
			t.Fatalf("after Leave, %d partitions had OnAssigned and never OnRevoked (the refused OnRevoked was dropped)", n)
		}
	})
}
