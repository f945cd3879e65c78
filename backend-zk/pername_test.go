package zksimba_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// cycleNames acquires and releases n distinct names (prefix + index from
// first) through the backend's API, in batches of up to 1,000 names, with
// the given lock-delay: the bulk path of the per-name tests and
// benchmarks.
func cycleNames(t testing.TB, b *zksimba.Backend, id driver.ID, prefix string, first, n int, delay time.Duration) {
	t.Helper()
	ctx := context.Background()
	for start := first; start < first+n; start += 1000 {
		names := make([]string, 0, 1000)
		for i := start; i < min(start+1000, first+n); i++ {
			names = append(names, fmt.Sprintf("%s%d", prefix, i))
		}
		r, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names, LockDelay: delay})
		if err != nil {
			t.Fatalf("Acquire of %d names: %v", len(names), err)
		}
		leases := make([]driver.Lease, 0, len(names))
		for _, res := range r.Results {
			if res.Token == 0 || res.Err != nil {
				t.Fatalf("Acquire(%s): token %d, %v", res.Name, res.Token, res.Err)
			}
			leases = append(leases, driver.Lease{Name: res.Name, Token: res.Token})
		}
		if err := b.Release(ctx, driver.ReleaseRequest{ID: id, Leases: leases}); err != nil {
			t.Fatalf("Release of %d names: %v", len(leases), err)
		}
	}
}

// Issue 23: names acquired and released leave nothing behind in the
// ensemble: the node count under the root is back to what it was (the
// root, its epoch and its marker directory), with or without a
// lock-delay, for 1 and 10,000 names; and a name taken over after a delay
// leaves nothing once released (TestLockDelayAfterEnd).
func TestNamesLeaveNothingBehind(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	b := newBackend(t, srv, root, zksimba.WithMaxLockDelay(time.Minute))
	raw := rawConn(t, srv)
	s := open(t, b, 20*time.Second)
	keepAlive(t, b, s.ID, 2*time.Second)
	base := nodeCount(t, raw, root)
	first := 0
	// 10,000 names with a delay: each writes and deletes a marker too.
	for _, c := range []struct {
		n     int
		delay time.Duration
	}{{1, 0}, {1, time.Minute}, {10_000, time.Minute}} {
		{
			n, delay := c.n, c.delay
			cycleNames(t, b, s.ID, "order-", first, n, delay)
			first += n
			if got := nodeCount(t, raw, root); got != base {
				t.Errorf("%d names (delay %v) acquired and released: %d nodes under the root, %d before", n, delay, got, base)
			}
		}
	}
	t.Logf("nodes under the root: %d before and after %d names", base, first)
}

// The in-process guard behind the epochs is one word, not a map of every
// name (ADR 0255): every token reported raises it, and a grant below it
// (of any name) is refused with ErrTokenRegressed and its node deleted.
func TestTokenFloor(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	b := newBackend(t, srv, root)
	raw := rawConn(t, srv)
	s := open(t, b, 20*time.Second)
	t1 := acquire(t, b, s.ID, "a")[0].Token
	if got := zksimba.TokenFloor(b); got != t1 {
		t.Fatalf("floor %d after reporting token %d", got, t1)
	}
	t2 := acquire(t, b, s.ID, "b")[0].Token
	if t2 <= t1 || zksimba.TokenFloor(b) != t2 {
		t.Fatalf("tokens %d then %d, floor %d", t1, t2, zksimba.TokenFloor(b))
	}
	zksimba.RaiseTokenFloorForTest(b, t2+1<<40)
	r := acquire(t, b, s.ID, "c")[0]
	if r.Token != 0 || !errors.Is(r.Err, zksimba.ErrTokenRegressed) {
		t.Fatalf("a grant below the floor: token %d, %v; want ErrTokenRegressed", r.Token, r.Err)
	}
	if ok, _, err := raw.Exists(root + "/c"); err != nil || ok {
		t.Errorf("the refused grant's node: exists %v, %v", ok, err)
	}
}
