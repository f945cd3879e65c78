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

// sessionOn is an open session for the fault tests.
type sessionOn struct {
	t  *testing.T
	b  *etcdsimba.Backend
	id driver.ID
}

func openOn(t *testing.T, b *etcdsimba.Backend, lease time.Duration) *sessionOn {
	t.Helper()
	r, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return &sessionOn{t: t, b: b, id: r.ID}
}

func (s *sessionOn) acquire(name string) (uint64, time.Duration, error) {
	r, err := s.b.Acquire(ctxT(s.t, 10*time.Second), driver.AcquireRequest{ID: s.id, Names: []string{name}})
	if err != nil {
		return 0, 0, err
	}
	if r.Results[0].Err != nil {
		return 0, 0, r.Results[0].Err
	}
	return r.Results[0].Token, r.Quarantine, nil
}

func (s *sessionOn) mustAcquire(name string) uint64 {
	s.t.Helper()
	tok, q, err := s.acquire(name)
	if err != nil || tok == 0 {
		s.t.Fatalf("Acquire(%q): token %d, quarantine %v, err %v; want a grant", name, tok, q, err)
	}
	return tok
}

func (s *sessionOn) release(name string, tok uint64) {
	s.t.Helper()
	if err := s.b.Release(ctxT(s.t, 10*time.Second), driver.ReleaseRequest{ID: s.id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
		s.t.Fatalf("Release(%q): %v", name, err)
	}
}

func (s *sessionOn) renew(timeout time.Duration) (driver.RenewReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.b.Renew(ctx, driver.RenewRequest{ID: s.id})
}

// TestRestoreFromSnapshotQuarantines restores a member from a snapshot
// taken before a release and a new term (etcdctl snapshot restore, etcd's
// disaster recovery), then writes enough keys for the revision to pass the
// one before the restore, so that only the revision-vs-applied-index gap
// tells (ADR 0209). A process alive across the restore must find its
// session ended; a new process must find the loss, refuse Init, quarantine,
// and then hand out tokens above every earlier one.
func TestRestoreFromSnapshotQuarantines(t *testing.T) {
	const lease = 2 * time.Second
	c := startPrivate(t, 1)
	cli := newClient(t, c.endpoints())
	ns := newNamespace(t)
	opt := etcdsimba.WithMaxLease(lease)
	live := newBackend(t, cli, ns, opt)
	a := openOn(t, live, lease)
	t1 := a.mustAcquire("x")
	// A cluster of any age has applied more entries than it has
	// revisions; a restore sets its applied index back to a handful. A
	// store younger than a few dozen entries is the one case the gap
	// cannot tell (ADR 0209).
	for i := range 30 {
		if _, err := cli.Put(ctxT(t, 5*time.Second), fmt.Sprintf("/other/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	snap := c.snapshot(0)
	a.release("x", t1)
	t2 := a.mustAcquire("x")
	ty := a.mustAcquire("y")
	before, err := cli.Get(ctxT(t, 5*time.Second), "any")
	if err != nil {
		t.Fatal(err)
	}
	c.restore(snap)
	// Other writers push the revision past the one before the restore.
	for i := int64(0); i < before.Header.Revision+10; i++ {
		if _, err := cli.Put(ctxT(t, 5*time.Second), fmt.Sprintf("/filler/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}

	// The process alive across the restore: its session held x in a
	// history the store no longer has.
	if _, err := a.renew(5 * time.Second); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Renew across a restore: %v, want ErrExpired: the session's records are from a lost history", err)
	}

	// A new process.
	fresh := newBackendNoInit(t, newClient(t, c.endpoints()), ns, opt)
	if err := fresh.Init(ctxT(t, 5*time.Second)); !errors.Is(err, driver.ErrInitUnsafe) {
		t.Errorf("Init after a restore: %v, want ErrInitUnsafe", err)
	}
	s := openOn(t, fresh, lease)
	found := time.Now()
	tok, q, err := s.acquire("x")
	switch {
	case err != nil:
		t.Fatalf("Acquire after the restore: %v", err)
	case tok != 0 || q <= 0 || q > lease:
		t.Fatalf("Acquire after the restore: token %d, quarantine %v; want no grant and a quarantine in (0, %v]", tok, q, lease)
	}
	for time.Since(found) < q+50*time.Millisecond {
		time.Sleep(200 * time.Millisecond)
		if _, err := s.renew(5 * time.Second); err != nil {
			t.Fatalf("Renew in the quarantine: %v", err)
		}
	}
	for _, c := range []struct {
		name   string
		before uint64
	}{{"x", t2}, {"y", ty}} {
		if got := s.mustAcquire(c.name); got <= c.before {
			t.Errorf("Acquire(%q) after the restore's quarantine: token %d, want > %d: tokens never go backwards", c.name, got, c.before)
		}
	}
	// The live process's backend, reopened, is in the new epoch too.
	b2 := openOn(t, live, lease)
	if tok, _, err := b2.acquire("x"); err != nil || tok != 0 {
		t.Errorf("Acquire of a held name by the live process's new session: token %d, err %v; want refused", tok, err)
	}
}

// TestAcquireAcrossARestoreIsNotGranted restores a member from a snapshot
// taken before a term of x, pushes the revision past the one before the
// restore (so the in-process revision check sees nothing), and asks a
// session alive across the restore for a new name before any renewal: the
// restore check beside the Acquire's transaction (ADR 0209, 0326) must end
// the session instead of reporting the grant, made in a history that lost
// a term whose holder may still believe in it. The session's etcd lease is
// from before the snapshot, so the grant's transaction itself succeeds.
func TestAcquireAcrossARestoreIsNotGranted(t *testing.T) {
	const lease = 10 * time.Second
	c := startPrivate(t, 1)
	cli := newClient(t, c.endpoints())
	ns := newNamespace(t)
	live := newBackend(t, cli, ns, etcdsimba.WithMaxLease(lease))
	a := openOn(t, live, lease)
	for i := range 30 { // a store of some age: see TestRestoreFromSnapshotQuarantines
		if _, err := cli.Put(ctxT(t, 5*time.Second), fmt.Sprintf("/other/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	snap := c.snapshot(0)
	a.mustAcquire("x") // a term the restore loses
	before, err := cli.Get(ctxT(t, 5*time.Second), "any")
	if err != nil {
		t.Fatal(err)
	}
	c.restore(snap)
	for i := int64(0); i < before.Header.Revision+10; i++ {
		if _, err := cli.Put(ctxT(t, 5*time.Second), fmt.Sprintf("/filler/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if tok, _, err := a.acquire("y"); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Acquire across a restore: token %d, err %v; want ErrExpired, not a grant in a history that lost x's term", tok, err)
	}
}

// TestRevisionGoingBackEndsSessions restores a snapshot without writes
// after it: a process that saw a higher revision finds the store went back
// at its next call and treats it as a loss.
func TestRevisionGoingBackEndsSessions(t *testing.T) {
	const lease = 2 * time.Second
	c := startPrivate(t, 1)
	cli := newClient(t, c.endpoints())
	ns := newNamespace(t)
	live := newBackend(t, cli, ns, etcdsimba.WithMaxLease(lease))
	a := openOn(t, live, lease)
	snap := c.snapshot(0)
	tx := a.mustAcquire("x")
	c.restore(snap)
	if _, _, err := a.acquire("y"); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Acquire after the store went back: %v, want ErrExpired", err)
	}
	s := openOn(t, live, lease)
	if tok, q, err := s.acquire("x"); err != nil || tok != 0 || q <= 0 {
		t.Errorf("Acquire after the store went back: token %d, quarantine %v, err %v; want a quarantine (the earlier holder %d may still believe)", tok, q, err, tx)
	}
}
