package etcdsimba_test

import (
	"errors"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// openDriver opens a driver session on b with the given lease.
func openDriver(t testing.TB, b *etcdsimba.Backend, lease time.Duration) driver.ID {
	t.Helper()
	r, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: lease, Owner: driver.Owner{Identity: "delay-test"}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r.ID
}

func acquireOne(t testing.TB, b *etcdsimba.Backend, id driver.ID, name string, delay time.Duration) uint64 {
	t.Helper()
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: id, Names: []string{name}, LockDelay: delay})
	if err != nil {
		t.Fatalf("Acquire(%s, delay %v): %v", name, delay, err)
	}
	if r.Results[0].Err != nil {
		t.Fatalf("Acquire(%s): %v", name, r.Results[0].Err)
	}
	return r.Results[0].Token
}

// keyCount is the number of keys under the namespace's prefix.
func keyCount(t testing.TB, cli *clientv3.Client, ns string) int64 {
	t.Helper()
	r, err := cli.Get(ctxT(t, 10*time.Second), ns+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count %s/: %v", ns, err)
	}
	return r.Count
}

// A term with a lock-delay that ends without a release (its etcd lease
// revoked by someone else, as the server's expiry would) keeps its name
// refused for the delay, measured from when a candidate found it ended,
// then granted with a higher token; nothing of the name is left after.
func TestLockDelayAfterExpiry(t *testing.T) {
	const delay = 3 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	// WithoutRevokeGuard: this test measures the lock-delay itself; the
	// guard (on by default on the tests' etcd 3.4.23, ADR 0305) would raise
	// it to the session's 10 s lease (its own delay is
	// TestRevokeGuardHoldsANameRevokedEarly's).
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLockDelay(5*time.Second), etcdsimba.WithoutRevokeGuard())
	base := keyCount(t, cli, ns)
	a, c := openDriver(t, b, 10*time.Second), openDriver(t, b, 10*time.Second)
	t1 := acquireOne(t, b, a, "job", delay)
	if t1 == 0 {
		t.Fatal("first acquisition refused")
	}
	lease, err := parseLease(string(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), lease); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	var t2 uint64
	var firstRefusal time.Time
	for deadline := time.Now().Add(3 * delay); time.Now().Before(deadline); {
		if t2 = acquireOne(t, b, c, "job", 0); t2 != 0 {
			break
		}
		if firstRefusal.IsZero() {
			firstRefusal = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	granted := time.Now()
	t.Logf("refused for %v after the end, granted with token %d after %d", granted.Sub(ended), t2, t1)
	switch {
	case firstRefusal.IsZero():
		t.Fatal("the name was granted at once after a term with a lock-delay ended without a release")
	case t2 == 0:
		t.Fatalf("the name was still refused %v after the end (delay %v)", time.Since(ended), delay)
	case granted.Sub(ended) < delay:
		t.Errorf("granted %v after the end, before the delay of %v", granted.Sub(ended), delay)
	case t2 <= t1:
		t.Errorf("token %d after %d", t2, t1)
	}
	if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: c, Leases: []driver.Lease{{Name: "job", Token: t2}}}); err != nil {
		t.Fatal(err)
	}
	// The sessions' keys: c's is still there (one); a's went with its lease.
	if n := keyCount(t, cli, ns); n != base+1 {
		t.Errorf("%d keys under the namespace after the delay, the grant and the release; want %d (baseline %d + the open session)", n, base+1, base)
	}
}

// A release, and a Close, skip the delay: the next candidate is granted at
// once, and no marker is left.
func TestLockDelayReleaseAndCloseSkipIt(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLockDelay(time.Minute))
	base := keyCount(t, cli, ns)
	c := openDriver(t, b, 10*time.Second)
	for _, how := range []string{"release", "close"} {
		a := openDriver(t, b, 10*time.Second)
		tok := acquireOne(t, b, a, "job", time.Minute)
		if tok == 0 {
			t.Fatalf("%s: acquisition refused", how)
		}
		var err error
		if how == "release" {
			err = b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "job", Token: tok}}})
		} else {
			err = b.Close(ctxT(t, 5*time.Second), a)
		}
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		next := acquireOne(t, b, c, "job", 0)
		if next == 0 {
			t.Fatalf("after a %s, the name was refused (the delay of a minute applied)", how)
		}
		if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: c, Leases: []driver.Lease{{Name: "job", Token: next}}}); err != nil {
			t.Fatal(err)
		}
		if how == "release" {
			if err := b.Close(ctxT(t, 5*time.Second), a); err != nil {
				t.Fatal(err)
			}
		}
		if n := keyCount(t, cli, ns); n != base+1 {
			t.Errorf("after a %s: %d keys under the namespace, want %d (baseline + c's session key)", how, n, base+1)
		}
	}
}

// A delay above the backend's maximum, or negative, refuses the whole
// request with ErrLockDelay and writes nothing.
func TestLockDelayAboveTheMaximum(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	for _, tc := range []struct {
		opts  []etcdsimba.Option
		delay time.Duration
	}{
		{nil, time.Second},
		{[]etcdsimba.Option{etcdsimba.WithMaxLockDelay(2 * time.Second)}, 3 * time.Second},
		{[]etcdsimba.Option{etcdsimba.WithMaxLockDelay(2 * time.Second)}, -time.Second},
	} {
		b := newBackend(t, cli, ns, tc.opts...)
		id := openDriver(t, b, 10*time.Second)
		before := keyCount(t, cli, ns)
		_, err := b.Acquire(ctxT(t, 5*time.Second), driver.AcquireRequest{ID: id, Names: []string{"a", "b"}, LockDelay: tc.delay})
		if !errors.Is(err, driver.ErrLockDelay) {
			t.Errorf("delay %v: %v, want ErrLockDelay", tc.delay, err)
		}
		if n := keyCount(t, cli, ns); n != before {
			t.Errorf("delay %v: %d keys after the refusal, %d before", tc.delay, n, before)
		}
	}
	if _, err := etcdsimba.New(cli, ns, etcdsimba.WithMaxLockDelay(-time.Second)); !errors.Is(err, etcdsimba.ErrInvalidOption) {
		t.Errorf("WithMaxLockDelay(-1s): %v, want ErrInvalidOption", err)
	}
}

// The delay key is on an etcd lease of the delay's length: the server's
// lease clock ends it, whatever the candidates' clocks say.
func TestLockDelayIsAnEtcdLease(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLockDelay(time.Minute))
	a, c := openDriver(t, b, 10*time.Second), openDriver(t, b, 10*time.Second)
	if acquireOne(t, b, a, "job", 40*time.Second) == 0 {
		t.Fatal("refused")
	}
	lease, _ := parseLease(string(a))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), lease); err != nil {
		t.Fatal(err)
	}
	if tok := acquireOne(t, b, c, "job", 0); tok != 0 {
		t.Fatalf("granted %d at once", tok)
	}
	r, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/l/job")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the delay key: %v, %d keys", err, len(r.Kvs))
	}
	ttl, err := cli.TimeToLive(ctxT(t, 5*time.Second), clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 40 || ttl.TTL < 35 {
		t.Errorf("the delay's etcd lease: granted %ds, %ds left; want 40s", ttl.GrantedTTL, ttl.TTL)
	}
	m, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/d/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || m.Count != 0 {
		t.Errorf("markers left once the delay runs: %v, %d", err, m.Count)
	}
}

// The quarantine after a loss covers the lock-delays lost with the
// leases: MaxLease + MaxLockDelay.
func TestQuarantineCoversTheLockDelay(t *testing.T) {
	const maxLease, maxDelay = 2 * time.Second, 3 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLease(maxLease), etcdsimba.WithMaxLockDelay(maxDelay))
	id := openDriver(t, b, maxLease)
	if acquireOne(t, b, id, "x", maxDelay) == 0 {
		t.Fatal("refused before the loss")
	}
	if _, err := cli.Delete(ctxT(t, 5*time.Second), ns+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	id2 := openDriver(t, b, maxLease)
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: id2, Names: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Quarantine <= maxLease+maxDelay/2 || r.Quarantine > maxLease+maxDelay {
		t.Errorf("quarantine %v after the loss, want about MaxLease + MaxLockDelay = %v", r.Quarantine, maxLease+maxDelay)
	}
}

// A marker whose term ended without a release, on a name nobody asks for
// again, is swept by later Opens (a bounded range read each): its delay
// starts, and once it passed nothing of the name is left.
func TestLockDelayMarkerSwept(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	// WithoutRevokeGuard: this test measures the lock-delay itself; the
	// guard (on by default on the tests' etcd 3.4.23, ADR 0305) would raise
	// it to the session's 10 s lease (its own delay is
	// TestRevokeGuardHoldsANameRevokedEarly's).
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLockDelay(5*time.Second), etcdsimba.WithoutRevokeGuard())
	base := keyCount(t, cli, ns)
	a := openDriver(t, b, 10*time.Second)
	if acquireOne(t, b, a, "job", time.Second) == 0 {
		t.Fatal("refused")
	}
	lease, _ := parseLease(string(a))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), lease); err != nil {
		t.Fatal(err)
	}
	markers := func() int64 {
		r, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/d/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	for i := 0; markers() != 0; i++ {
		if i == 50 {
			t.Fatal("the marker is still there after 50 Opens")
		}
		if err := b.Close(ctxT(t, 5*time.Second), openDriver(t, b, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the sweep runs in the background
	}
	for end := time.Now().Add(10 * time.Second); keyCount(t, cli, ns) != base; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d keys 10 s after the sweep, %d before the name was used", keyCount(t, cli, ns), base)
		}
	}
}
