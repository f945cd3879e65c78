package etcdsimba_test

import (
	"errors"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestNewRefusesBadInput(t *testing.T) {
	cli := newClient(t, single(t))
	if _, err := etcdsimba.New(nil, "/a"); !errors.Is(err, etcdsimba.ErrInvalidOption) {
		t.Errorf("New(nil client) = %v, want ErrInvalidOption", err)
	}
	if _, err := etcdsimba.New(cli, "a/b"); !errors.Is(err, etcdsimba.ErrInvalidNamespace) {
		t.Errorf("New(namespace without /) = %v, want ErrInvalidNamespace", err)
	}
	if _, err := etcdsimba.New(cli, "/a", etcdsimba.WithMaxLease(time.Millisecond)); !errors.Is(err, etcdsimba.ErrInvalidOption) {
		t.Errorf("New(WithMaxLease(1ms)) = %v, want ErrInvalidOption", err)
	}
	bad, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-without-port"}, DialTimeout: time.Second, Logger: zapNop})
	if err == nil {
		defer bad.Close()
		if _, err := etcdsimba.New(bad, "/a"); !errors.Is(err, etcdsimba.ErrInvalidOption) {
			t.Errorf("New(client of %q) = %v, want ErrInvalidOption naming the endpoint", "etcd-without-port", err)
		}
	}
}

// TestAcquireAfterNamespaceDeletedExpires deletes a namespace's keys by
// prefix under a live session: its next Acquire must not grant in a
// namespace whose records are gone (the epoch is compared by the grant).
func TestAcquireAfterNamespaceDeletedExpires(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLease(2*time.Second))
	s := openOn(t, b, 2*time.Second)
	s.mustAcquire("x")
	if _, err := cli.Delete(ctxT(t, 5*time.Second), ns+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if tok, _, err := s.acquire("y"); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Acquire after the namespace was deleted: token %d, err %v; want ErrExpired", tok, err)
	}
}

// TestInitRefusesLeaseKeysWithoutEpoch: lease keys without an epoch
// record are a sign of a partial loss; Init refuses, ForceInit proceeds.
func TestInitRefusesLeaseKeysWithoutEpoch(t *testing.T) {
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns)
	s := openOn(t, b, 2*time.Second)
	s.mustAcquire("x")
	if _, err := cli.Delete(ctxT(t, 5*time.Second), ns+"/@simba/epoch"); err != nil {
		t.Fatal(err)
	}
	fresh := newBackendNoInit(t, cli, ns)
	if err := fresh.Init(ctxT(t, 5*time.Second)); !errors.Is(err, driver.ErrInitUnsafe) {
		t.Fatalf("Init with lease keys and no epoch: %v, want ErrInitUnsafe", err)
	}
	if err := fresh.ForceInit(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("ForceInit: %v", err)
	}
}
