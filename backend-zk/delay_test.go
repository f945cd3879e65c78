package zksimba_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// nodeCount is the number of nodes in the subtree at path (path included;
// 0 if it does not exist).
func nodeCount(t testing.TB, conn *zk.Conn, path string) int {
	t.Helper()
	children, _, err := conn.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return 0
	}
	if err != nil {
		t.Fatalf("children of %s: %v", path, err)
	}
	n := 1
	for _, c := range children {
		n += nodeCount(t, conn, path+"/"+c)
	}
	return n
}

func acquireDelay(t testing.TB, b *zksimba.Backend, id driver.ID, name string, delay time.Duration) uint64 {
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

// candidate is a session of a backend that tries a name.
type candidate struct {
	b  *zksimba.Backend
	id driver.ID
}

// waitGrant retries name on each candidate in turn until one is granted,
// at most within, and returns the token, the time of the grant, whether
// it was refused first, and which candidate won.
func waitGrant(t testing.TB, cs []candidate, name string, within time.Duration) (uint64, time.Time, bool, int) {
	t.Helper()
	refused := false
	for end := time.Now().Add(within); time.Now().Before(end); {
		for i, c := range cs {
			if tok := acquireDelay(t, c.b, c.id, name, 0); tok != 0 {
				return tok, time.Now(), refused, i
			}
			refused = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s still refused after %v", name, within)
	return 0, time.Time{}, refused, 0
}

// A term with a lock-delay that ends without a release keeps its name
// refused for the delay, counted from when a candidate found it ended on
// the ZooKeeper leader's clock, then granted with a higher token; once
// released, nothing of the name is left. Two candidates on two backends:
// the second has no local estimate of the delay's end, so it asks the
// server at every attempt (the delay lives in the ensemble).
func TestLockDelayAfterEnd(t *testing.T) {
	const delay = 2 * time.Second
	for _, how := range []string{"node deleted", "session expired"} {
		t.Run(how, func(t *testing.T) {
			srv := standalone(t)
			root := newRoot(t)
			cut := &cutter{}
			ha := newBackend(t, srv, root, zksimba.WithMaxLockDelay(5*time.Second), withDial(cut))
			hb := newBackendNoInit(t, srv, root, zksimba.WithMaxLockDelay(5*time.Second))
			hc := newBackendNoInit(t, srv, root, zksimba.WithMaxLockDelay(5*time.Second))
			raw := rawConn(t, srv)
			a, c, c2 := open(t, ha, 4*time.Second), open(t, hb, 20*time.Second), open(t, hc, 20*time.Second)
			keepAlive(t, hb, c.ID, time.Second)
			keepAlive(t, hc, c2.ID, time.Second)
			base := nodeCount(t, raw, root)
			t1 := acquireDelay(t, ha, a.ID, "job", delay)
			if t1 == 0 {
				t.Fatal("first acquisition refused")
			}
			if how == "node deleted" {
				if err := raw.Delete(root+"/job", -1); err != nil {
					t.Fatal(err)
				}
			} else {
				cut.Cut()
				for end := time.Now().Add(20 * time.Second); ; {
					if ok, _, err := raw.Exists(root + "/job"); err == nil && !ok {
						break
					}
					if time.Now().After(end) {
						t.Fatal("the holder's session did not expire")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			ended := time.Now()
			cs := []candidate{{hb, c.ID}, {hc, c2.ID}}
			t2, at, refused, won := waitGrant(t, cs, "job", 4*delay)
			t.Logf("granted %v after the end, token %d after %d", at.Sub(ended), t2, t1)
			switch {
			case !refused:
				t.Fatal("granted at once after a term with a lock-delay ended without a release")
			case at.Sub(ended) < delay:
				t.Errorf("granted %v after the end, before the delay of %v", at.Sub(ended), delay)
			case t2 <= t1:
				t.Errorf("token %d after %d", t2, t1)
			}
			if err := cs[won].b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: cs[won].id, Leases: []driver.Lease{{Name: "job", Token: t2}}}); err != nil {
				t.Fatal(err)
			}
			if n := nodeCount(t, raw, root); n != base {
				t.Errorf("%d nodes under the root after the delay, the grant and the release; %d before", n, base)
			}
		})
	}
}

// A release, and a Close, skip the delay; no marker is left.
func TestLockDelayReleaseAndCloseSkipIt(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	b := newBackend(t, srv, root, zksimba.WithMaxLockDelay(time.Minute))
	raw := rawConn(t, srv)
	c := open(t, b, 10*time.Second)
	keepAlive(t, b, c.ID, time.Second)
	base := nodeCount(t, raw, root)
	for _, how := range []string{"release", "close"} {
		a := open(t, b, 10*time.Second)
		tok := acquireDelay(t, b, a.ID, "job", time.Minute)
		if tok == 0 {
			t.Fatalf("%s: refused", how)
		}
		if how == "release" {
			if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: a.ID, Leases: []driver.Lease{{Name: "job", Token: tok}}}); err != nil {
				t.Fatal(err)
			}
		} else if err := b.Close(ctxT(t, 5*time.Second), a.ID); err != nil {
			t.Fatal(err)
		}
		next := acquireDelay(t, b, c.ID, "job", 0)
		if next == 0 {
			t.Fatalf("after a %s the name was refused (the minute's delay applied)", how)
		}
		if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: c.ID, Leases: []driver.Lease{{Name: "job", Token: next}}}); err != nil {
			t.Fatal(err)
		}
		if how == "release" {
			_ = b.Close(ctxT(t, 5*time.Second), a.ID)
		}
		if n := nodeCount(t, raw, root); n != base {
			t.Errorf("after a %s: %d nodes under the root, %d before", how, n, base)
		}
	}
}

// A delay above the maximum, or negative, refuses the whole request with
// ErrLockDelay and creates nothing.
func TestLockDelayAboveTheMaximum(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	raw := rawConn(t, srv)
	for _, tc := range []struct {
		opts  []zksimba.Option
		delay time.Duration
	}{
		{nil, time.Second},
		{[]zksimba.Option{zksimba.WithMaxLockDelay(2 * time.Second)}, 3 * time.Second},
		{[]zksimba.Option{zksimba.WithMaxLockDelay(2 * time.Second)}, -time.Second},
	} {
		b := newBackend(t, srv, root, tc.opts...)
		id := open(t, b, 10*time.Second).ID
		before := nodeCount(t, raw, root)
		_, err := b.Acquire(ctxT(t, 5*time.Second), driver.AcquireRequest{ID: id, Names: []string{"a", "b"}, LockDelay: tc.delay})
		if !errors.Is(err, driver.ErrLockDelay) {
			t.Errorf("delay %v: %v, want ErrLockDelay", tc.delay, err)
		}
		if n := nodeCount(t, raw, root); n != before {
			t.Errorf("delay %v: %d nodes after the refusal, %d before", tc.delay, n, before)
		}
	}
	if _, err := zksimba.New(srv, root, zksimba.WithMaxLockDelay(-time.Second)); !errors.Is(err, zksimba.ErrInvalidOption) {
		t.Errorf("WithMaxLockDelay(-1s): %v, want ErrInvalidOption", err)
	}
}

// The quarantine after a loss covers the lock-delays lost with the
// leases: MaxLease + MaxLockDelay.
func TestQuarantineCoversTheLockDelay(t *testing.T) {
	const maxLease, maxDelay = 2 * time.Second, 3 * time.Second
	srv, root := standalone(t), newRoot(t)
	b := newBackend(t, srv, root, zksimba.WithMaxLease(maxLease), zksimba.WithMaxLockDelay(maxDelay))
	s := open(t, b, maxLease)
	if acquireDelay(t, b, s.ID, "x", maxDelay) == 0 {
		t.Fatal("refused before the loss")
	}
	deleteAll(t, rawConn(t, srv), root)
	s2 := open(t, b, maxLease)
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s2.ID, Names: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Quarantine <= maxLease+maxDelay/2 || r.Quarantine > maxLease+maxDelay {
		t.Errorf("quarantine %v after the loss, want about MaxLease + MaxLockDelay = %v", r.Quarantine, maxLease+maxDelay)
	}
}

// A root made before lock-delays has no marker directory: the first grant
// makes it (with or without a delay), and the delay works there.
func TestLockDelayOnARootWithoutTheMarkerDirectory(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	b := newBackend(t, srv, root, zksimba.WithMaxLockDelay(time.Minute))
	raw := rawConn(t, srv)
	if err := raw.Delete(root+"/@delay", -1); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, 10*time.Second)
	for i, delay := range []time.Duration{0, time.Minute} {
		name := fmt.Sprintf("n%d", i)
		tok := acquireDelay(t, b, s.ID, name, delay)
		if tok == 0 {
			t.Fatalf("delay %v: refused", delay)
		}
		if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := raw.Delete(root+"/@delay", -1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ok, _, err := raw.Exists(root + "/@delay"); err != nil || !ok {
		t.Errorf("the marker directory after a grant: exists %v, %v", ok, err)
	}
}

// A session that expires holding names with a lock-delay leaves their
// markers; the Backend's next session sweeps them once the delay has
// passed on the server's clock, though nobody asks for the names: nothing
// of them is left.
func TestLockDelayMarkersOfAnExpiredSessionSwept(t *testing.T) {
	const delay = time.Second
	srv, root := standalone(t), newRoot(t)
	cut := &cutter{}
	b := newBackend(t, srv, root, zksimba.WithMaxLockDelay(delay), withDial(cut))
	raw := rawConn(t, srv)
	base := nodeCount(t, raw, root)
	s := open(t, b, 4*time.Second)
	for _, n := range []string{"a", "b", "c"} {
		if acquireDelay(t, b, s.ID, n, delay) == 0 {
			t.Fatalf("%s refused", n)
		}
	}
	cut.Cut()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := b.Renew(ctxT(t, time.Second), driver.RenewRequest{ID: s.ID}); errors.Is(err, driver.ErrExpired) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the session did not expire")
		}
	}
	cut.Heal()
	// The server's expiry may come after the client's: wait for the nodes.
	for end := time.Now().Add(20 * time.Second); nodeCount(t, raw, root) != base+3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d nodes, want the %d of the namespace and 3 markers", nodeCount(t, raw, root), base)
		}
	}
	s2 := open(t, b, 10*time.Second)
	keepAlive(t, b, s2.ID, time.Second)
	for end := time.Now().Add(10 * time.Second); nodeCount(t, raw, root) != base; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d nodes 10 s after the next session opened, %d before the names were used", nodeCount(t, raw, root), base)
		}
	}
}
