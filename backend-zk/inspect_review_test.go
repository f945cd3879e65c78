package zksimba_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// Entries for nodes that are gone leave Inspect's cache: a released name
// that is never asked for again must not keep its entry (its watch has
// fired, it can never be used), or a Backend that inspects names which
// come and go fills maxWatchedNodes with dead entries and stops caching.
func TestInspectCacheDropsNodesThatAreGone(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	c := newBackendNoInit(t, srv, root)
	all := driver.InspectRequest{Prefix: "j:"}
	for round := range 3 {
		var names []string
		for i := range 20 {
			names = append(names, fmt.Sprintf("j:%d-%d", round, i))
		}
		res := acquire(t, a, sa.ID, names...)
		if hs, err := c.Inspect(ctxT(t, 10*time.Second), all); err != nil || len(hs) != 20 {
			t.Fatalf("round %d: Inspect = %d holders, %v; want 20", round, len(hs), err)
		}
		var ls []driver.Lease
		for i, r := range res {
			ls = append(ls, driver.Lease{Name: names[i], Token: r.Token})
		}
		if err := a.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: ls}); err != nil {
			t.Fatal(err)
		}
		if hs, err := c.Inspect(ctxT(t, 10*time.Second), all); err != nil || len(hs) != 0 {
			t.Fatalf("round %d: Inspect after the release = %+v, %v; want nothing", round, hs, err)
		}
		if n := zksimba.InspectCacheLen(c); n != 0 {
			t.Fatalf("round %d: %d nodes kept after every one was released (want 0)", round, n)
		}
	}
}

// blockingDialer holds every dial until release is closed.
type blockingDialer struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (d *blockingDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.once.Do(func() { close(d.entered) })
	<-d.release
	return nil, errors.New("dial released")
}

// Shutdown ends an Inspect that is still dialling its read connection:
// the Inspect returns ErrClosed at once, not at its context's end, and no
// connection of the Backend outlives Shutdown (goleak in TestMain).
func TestShutdownEndsInspectDialling(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	d := &blockingDialer{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(d.release) })
	c, err := zksimba.New(srv, root, zksimba.WithDialer(d.dial))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Inspect(ctx, driver.InspectRequest{Prefix: "x"})
		done <- err
	}()
	<-d.entered
	if err := c.Shutdown(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Inspect dialling when Shutdown ran = %v, want ErrClosed", err)
	}
}

// Several Inspects on one Backend, concurrent with acquisitions and
// releases: an older read stored after a newer one carries a watch that
// has fired, so once the changes stop the Backend answers as a fresh one.
func TestInspectConcurrentInspectsWithChanges(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	b := newBackend(t, srv, root)
	sa, sb := open(t, a, 10*time.Second), open(t, b, 10*time.Second)
	c := newBackendNoInit(t, srv, root)
	all := driver.InspectRequest{Prefix: "k:"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req := all
				if w%2 == 1 {
					req = driver.InspectRequest{Names: []string{"k:0", "k:1", "k:2", "k:3"}}
				}
				if _, err := c.Inspect(ctxT(t, 10*time.Second), req); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for round := range 30 {
		be, id := a, sa.ID
		if round%2 == 1 {
			be, id = b, sb.ID
		}
		name := fmt.Sprintf("k:%d", round%4)
		r := acquire(t, be, id, name)
		if r[0].Token == 0 {
			continue
		}
		if err := be.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: r[0].Token}}}); err != nil {
			t.Fatal(err)
		}
		acquire(t, be, id, name) // held again, with a new czxid
	}
	close(stop)
	wg.Wait()
	for _, req := range []driver.InspectRequest{all, {Names: []string{"k:0", "k:1", "k:2", "k:3"}}} {
		got, err := c.Inspect(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := newBackendNoInit(t, srv, root).Inspect(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Inspect(%+v) after concurrent inspections = %+v, a fresh backend's = %+v", req, got, want)
		}
	}
}

// The root deleted and created again (a new epoch) under a cached node:
// the node's watch fired with its deletion, so the new holder of the same
// name, with the new epoch's token, is reported, never the old one.
func TestInspectAfterRootRecreated(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	acquire(t, a, sa.ID, "x", "y")
	c := newBackendNoInit(t, srv, root)
	for _, req := range []driver.InspectRequest{{}, {Names: []string{"x", "y"}}} {
		if hs, err := c.Inspect(ctxT(t, 10*time.Second), req); err != nil || len(hs) != 2 {
			t.Fatalf("Inspect = %+v, %v; want x and y", hs, err)
		}
	}
	if err := a.Close(ctxT(t, 10*time.Second), sa.ID); err != nil {
		t.Fatal(err)
	}
	raw := rawConn(t, srv)
	var del func(p string)
	del = func(p string) {
		cs, _, err := raw.Children(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range cs {
			del(p + "/" + ch)
		}
		if err := raw.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	del(root)
	if hs, err := c.Inspect(ctxT(t, 10*time.Second), driver.InspectRequest{}); err != nil || len(hs) != 0 {
		t.Fatalf("Inspect without a root = %+v, %v; want nothing", hs, err)
	}
	b := newBackend(t, srv, root)
	sb := open(t, b, 10*time.Second)
	acquire(t, b, sb.ID, "x")
	for _, req := range []driver.InspectRequest{{}, {Names: []string{"x", "y"}}} {
		got, err := c.Inspect(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := newBackendNoInit(t, srv, root).Inspect(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Session != sb.ID || !reflect.DeepEqual(got, want) {
			t.Fatalf("Inspect(%+v) after the root was recreated = %+v, a fresh backend's = %+v; want x held by %s", req, got, want, sb.ID)
		}
	}
}

// An Open still connecting when Shutdown runs (the servers unreachable)
// ends with ErrClosed, and its connection stops redialling (goleak): it
// waited for its context alone, forever for one without a deadline
// (found by review of the markExpired fix).
func TestShutdownEndsOpenConnecting(t *testing.T) {
	dialled := make(chan struct{})
	var once sync.Once
	unreachable := func(string, string, time.Duration) (net.Conn, error) {
		once.Do(func() { close(dialled) })
		return nil, errors.New("test: unreachable")
	}
	c, err := zksimba.New(standalone(t), newRoot(t), zksimba.WithDialer(unreachable))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Open(context.Background(), driver.OpenRequest{LeaseDuration: 10 * time.Second})
		done <- err
	}()
	select {
	case <-dialled:
	case <-time.After(10 * time.Second):
		t.Fatal("the Open did not dial within 10 s")
	}
	if err := c.Shutdown(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("Open connecting when Shutdown ran = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open still connecting 10 s after Shutdown")
	}
}
