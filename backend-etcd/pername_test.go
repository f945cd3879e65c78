package etcdsimba_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
)

// cycleNames acquires and releases n distinct names (prefix + index from
// first) through the backend's API, in batches of up to 1,000 names, with
// the given lock-delay: the bulk path of the per-name tests and
// benchmarks.
func cycleNames(t testing.TB, b *etcdsimba.Backend, id driver.ID, prefix string, first, n int, delay time.Duration) {
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

// Issue 23: names acquired and released leave nothing behind in etcd: the
// key count under the namespace is back to what it was (the epoch and the
// session's key), with or without a lock-delay, for 1 and 10,000 names.
// (etcd's MVCC history keeps the deleted revisions until the cluster's
// compaction, as for every etcd client: that is the operator's setting.)
func TestNamesLeaveNothingBehind(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLockDelay(time.Minute))
	id := openDriver(t, b, 20*time.Second)
	keepRenewing(t, b, id, 2*time.Second)
	base := keyCount(t, cli, ns)
	first := 0
	// 10,000 names with a delay: each writes and deletes a marker too.
	for _, c := range []struct {
		n     int
		delay time.Duration
	}{{1, 0}, {1, time.Minute}, {10_000, time.Minute}} {
		{
			n, delay := c.n, c.delay
			cycleNames(t, b, id, "order-", first, n, delay)
			first += n
			if got := keyCount(t, cli, ns); got != base {
				t.Errorf("%d names (delay %v) acquired and released: %d keys under the namespace, %d before", n, delay, got, base)
			}
		}
	}
	t.Logf("keys under the namespace: %d before and after %d names", base, first)
}

// keepRenewing renews id every period until the test ends.
func keepRenewing(t testing.TB, b *etcdsimba.Backend, id driver.ID, period time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), 2*period)
				_, _ = b.Renew(ctx, driver.RenewRequest{ID: id})
				cancel()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// The in-process guard behind the epochs is one word, not a map of every
// name (ADR 0255): every token reported raises it, and a grant below it
// (of any name) is refused with ErrTokenRegressed and its key deleted.
func TestTokenFloor(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns)
	id := openDriver(t, b, 20*time.Second)
	t1 := acquireOne(t, b, id, "a", 0)
	if got := etcdsimba.TokenFloor(b); got != t1 {
		t.Fatalf("floor %d after reporting token %d", got, t1)
	}
	t2 := acquireOne(t, b, id, "b", 0)
	if t2 <= t1 || etcdsimba.TokenFloor(b) != t2 {
		t.Fatalf("tokens %d then %d, floor %d", t1, t2, etcdsimba.TokenFloor(b))
	}
	etcdsimba.RaiseTokenFloorForTest(b, t2+1<<40)
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: id, Names: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Results[0].Token != 0 || !errors.Is(r.Results[0].Err, etcdsimba.ErrTokenRegressed) {
		t.Fatalf("a grant below the floor: %+v; want ErrTokenRegressed", r.Results[0])
	}
	if g, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/l/c"); err != nil || len(g.Kvs) != 0 {
		t.Errorf("the refused grant's key: %v, %d keys", err, len(g.Kvs))
	}
}
