package zksimba_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// readCounter counts the read requests a backend's connections send:
// go-zookeeper writes each request as one frame in one Write (length,
// xid, opcode); the first frame of a connection is the connect request.
type readCounter struct {
	reads atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func (r *readCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	return &readCountConn{Conn: c, r: r}, nil
}

// drop closes the TCP connections dialled so far: the client reconnects.
func (r *readCounter) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

type readCountConn struct {
	net.Conn
	r       *readCounter
	mu      sync.Mutex
	started bool
}

func (c *readCountConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := !c.started
	c.started = true
	c.mu.Unlock()
	if !first && len(p) >= 12 {
		switch binary.BigEndian.Uint32(p[8:12]) {
		case 3, 4, 8, 9, 12, 22: // exists, getData, getChildren, sync, getChildren2, multiRead
			c.r.reads.Add(1)
		}
	}
	return c.Conn.Write(p)
}

// inspectBoth asks the counting inspector c and a fresh backend (which has
// read nothing before) the same question; their answers must agree. It
// returns the answer and the reads c sent for it.
func inspectBoth(t *testing.T, c *zksimba.Backend, rc *readCounter, srv []string, root string, req driver.InspectRequest) ([]driver.Holder, int64) {
	t.Helper()
	before := rc.reads.Load()
	got, err := c.Inspect(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Inspect(%+v): %v", req, err)
	}
	reads := rc.reads.Load() - before
	fresh := newBackendNoInit(t, srv, root)
	want, err := fresh.Inspect(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("fresh Inspect(%+v): %v", req, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Inspect(%+v) after earlier inspections = %+v, a fresh backend's = %+v", req, got, want)
	}
	return got, reads
}

// An Inspect reads the lease nodes once: while the root's children do not
// change, the next is the sync, the root and the epoch's identity node (3
// requests, not one per lease); a release or a new holder is seen at once.
func TestInspectReadsOnlyWhatChanged(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("g:%d", i))
	}
	res := acquire(t, a, sa.ID, names...)
	rc := &readCounter{}
	c := newBackendNoInit(t, srv, root, zksimba.WithDialer(rc.dial))
	all := driver.InspectRequest{Prefix: "g:"}

	hs, reads := inspectBoth(t, c, rc, srv, root, all)
	if len(hs) != 100 || reads < 100 {
		t.Fatalf("first Inspect: %d holders in %d reads; want 100 holders, a read each", len(hs), reads)
	}
	if _, reads = inspectBoth(t, c, rc, srv, root, all); reads != 3 {
		t.Fatalf("Inspect with nothing changed: %d reads, want 3 (sync, root, epoch identity)", reads)
	}
	if _, reads = inspectBoth(t, c, rc, srv, root, driver.InspectRequest{Names: []string{"g:7", "g:x"}}); reads != 3 {
		t.Fatalf("Inspect of names with nothing changed: %d reads, want 3", reads)
	}

	if err := a.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "g:5", Token: res[5].Token}}}); err != nil {
		t.Fatal(err)
	}
	// Asked by name, the released lease is gone at once: its cached node's
	// watch has fired (a name lookup lists nothing, so no sweep of the
	// cache has dropped it first).
	if hs, _ = inspectBoth(t, c, rc, srv, root, driver.InspectRequest{Names: []string{"g:5", "g:6"}}); len(hs) != 1 || hs[0].Name != "g:6" {
		t.Fatalf("Inspect of g:5 and g:6 after g:5's release = %+v, want g:6 alone", hs)
	}
	// The release fired g:5's watch and the root's: the sync, the epoch,
	// the list, and nothing else.
	if hs, reads = inspectBoth(t, c, rc, srv, root, all); len(hs) != 99 || reads != 4 {
		t.Fatalf("Inspect after a release: %d holders in %d reads, want 99 in 4", len(hs), reads)
	}
	b := newBackend(t, srv, root)
	sb := open(t, b, 10*time.Second)
	if r := acquire(t, b, sb.ID, "g:5"); r[0].Token == 0 {
		t.Fatal("g:5 not acquired after its release")
	}
	hs, reads = inspectBoth(t, c, rc, srv, root, driver.InspectRequest{Names: []string{"g:5"}})
	if len(hs) != 1 || hs[0].Session != sb.ID || reads != 4 {
		t.Fatalf("Inspect after a new holder: %+v in %d reads, want g:5 held by %s in 4", hs, reads, sb.ID)
	}
	if _, reads = inspectBoth(t, c, rc, srv, root, all); reads != 4 {
		t.Fatalf("Inspect of the prefix then: %d reads, want 4 (the list again)", reads)
	}
	// A name never seen before shows in the next list.
	acquire(t, b, sb.ID, "g:new")
	if hs, reads = inspectBoth(t, c, rc, srv, root, all); len(hs) != 101 || reads != 5 {
		t.Fatalf("Inspect after a new name: %d holders in %d reads, want 101 in 5 (the list, the new node)", len(hs), reads)
	}
	if _, reads = inspectBoth(t, c, rc, srv, root, all); reads != 3 {
		t.Fatalf("Inspect with nothing changed since: %d reads, want 3", reads)
	}
}

// A lease node from before the namespace's epoch is never reported, even
// when an earlier Inspect read it and the root's children did not change
// since: the epoch was replaced under it (ADR 0138).
func TestInspectCachedNodeFromBeforeTheEpoch(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	acquire(t, a, sa.ID, "x")
	c := newBackendNoInit(t, srv, root)
	if hs, err := c.Inspect(ctxT(t, 10*time.Second), driver.InspectRequest{}); err != nil || len(hs) != 1 {
		t.Fatalf("Inspect = %+v, %v; want x", hs, err)
	}
	if _, err := rawConn(t, srv).Set(root, []byte("not a record"), -1); err != nil {
		t.Fatal(err)
	}
	// Init finds no valid record: a new epoch, without a quarantine (an
	// operator's mistake ADR 0130 warns of), so only the epoch's rule
	// keeps x out.
	newBackend(t, srv, root)
	for _, req := range []driver.InspectRequest{{}, {Names: []string{"x"}}} {
		if hs, err := c.Inspect(ctxT(t, 10*time.Second), req); err != nil || len(hs) != 0 {
			t.Fatalf("Inspect(%+v) after the epoch was replaced = %+v, %v; want nothing (x is from before the epoch)", req, hs, err)
		}
	}
}
