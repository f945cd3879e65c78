package zksimba_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

func TestOpenUsesNegotiatedTimeout(t *testing.T) {
	srv := standalone(t)
	b := newBackend(t, srv, newRoot(t))
	// The shared standalone server runs with tickTime 200ms:
	// minSessionTimeout 400ms, maxSessionTimeout 20s.
	for _, tc := range []struct {
		name      string
		requested time.Duration
		want      time.Duration
	}{
		{"within bounds", 3 * time.Second, 3 * time.Second},
		{"clamped to max", time.Minute, 20 * time.Second},
		{"clamped to min", 100 * time.Millisecond, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := open(t, b, tc.requested)
			got, ok := b.SessionTimeout(r.ID)
			if !ok || got != tc.want {
				t.Fatalf("SessionTimeout = %v, %v; want %v (requested %v)", got, ok, tc.want, tc.requested)
			}
			if want := tc.want * 5 / 12; r.Remaining != want {
				t.Fatalf("Open Remaining = %v, want 5/12 × %v = %v", r.Remaining, tc.want, want)
			}
			if rr := renew(t, b, r.ID); rr.Remaining != tc.want*5/12 {
				t.Fatalf("Renew Remaining = %v, want %v", rr.Remaining, tc.want*5/12)
			}
		})
	}
}

func TestAcquireRenewRelease(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	a, b := newBackend(t, srv, root), newBackend(t, srv, root)
	sa, sb := open(t, a, 4*time.Second), open(t, b, 4*time.Second)
	if sa.ID == sb.ID {
		t.Fatalf("two sessions share id %s", sa.ID)
	}

	r0 := renew(t, a, sa.ID)
	if !r0.Full || len(r0.Leases) != 0 || r0.Version == 0 {
		t.Fatalf("fresh session renew = %+v, want full, empty, version != 0", r0)
	}

	res := acquire(t, a, sa.ID, "x", "y", "bad/name")
	if res[0].Token == 0 || res[1].Token == 0 {
		t.Fatalf("Acquire x, y = %+v, want tokens", res)
	}
	if !errors.Is(res[2].Err, deadline.ErrInvalidName) || res[2].Token != 0 {
		t.Fatalf("Acquire bad/name = %+v, want ErrInvalidName", res[2])
	}
	tx := res[0].Token
	if again := acquire(t, a, sa.ID, "x"); again[0].Token != tx {
		t.Fatalf("re-Acquire x = %d, want the owned token %d", again[0].Token, tx)
	}
	if other := acquire(t, b, sb.ID, "x"); other[0].Token != 0 || other[0].Err != nil {
		t.Fatalf("Acquire x by another session = %+v, want token 0", other[0])
	}

	r1 := renew(t, a, sa.ID)
	want := []driver.Lease{{Name: "x", Token: tx}, {Name: "y", Token: res[1].Token}}
	if !r1.Full || r1.Version == r0.Version || !equalLeases(r1.Leases, want) {
		t.Fatalf("renew after acquire = %+v, want full %v with a new version", r1, want)
	}
	r2, err := a.Renew(ctxT(t, 5*time.Second), driver.RenewRequest{ID: sa.ID, KnownVersion: r1.Version})
	if err != nil || r2.Full || r2.Version != r1.Version {
		t.Fatalf("renew with known version = %+v, %v; want not full, same version", r2, err)
	}

	// A stale release (wrong token) is a no-op.
	if err := a.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "x", Token: tx - 1}}}); err != nil {
		t.Fatalf("stale Release: %v", err)
	}
	// Another session's release of a's lease is a no-op too.
	if err := b.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: sb.ID, Leases: []driver.Lease{{Name: "x", Token: tx}}}); err != nil {
		t.Fatalf("foreign Release: %v", err)
	}
	if other := acquire(t, b, sb.ID, "x"); other[0].Token != 0 {
		t.Fatalf("x taken by b after no-op releases: %+v", other[0])
	}

	if err := a.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "x", Token: tx}}}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r3 := renew(t, a, sa.ID)
	if !equalLeases(r3.Leases, want[1:]) || r3.Version == r1.Version {
		t.Fatalf("renew after release = %+v, want %v", r3, want[1:])
	}
	got := acquire(t, b, sb.ID, "x")
	if got[0].Token <= tx {
		t.Fatalf("token after release = %d, want > %d", got[0].Token, tx)
	}
}

func TestCloseEndsSessionAndFreesLeases(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	a, b := newBackend(t, srv, root), newBackend(t, srv, root)
	sa, sb := open(t, a, 4*time.Second), open(t, b, 4*time.Second)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	if got := acquire(t, b, sb.ID, "x")[0].Token; got != 0 {
		t.Fatalf("b acquired a held lease: %d", got)
	}
	freed := notices(t, b, "x")
	if err := a.Close(ctxT(t, 5*time.Second), sa.ID); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-freed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice for x within 5s of closing its holder")
	}
	if got := acquire(t, b, sb.ID, "x")[0].Token; got <= tok {
		t.Fatalf("token after close = %d, want > %d", got, tok)
	}
	if _, err := a.Renew(ctxT(t, 5*time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew after Close = %v, want ErrExpired", err)
	}
	if err := a.Close(ctxT(t, 5*time.Second), sa.ID); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
}

func TestReleaseBroadcastsThroughWatch(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	a, b := newBackend(t, srv, root), newBackend(t, srv, root)
	sa, sb := open(t, a, 4*time.Second), open(t, b, 4*time.Second)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	freed := notices(t, b, "x")
	if got := acquire(t, b, sb.ID, "x")[0].Token; got != 0 {
		t.Fatalf("b acquired a held lease: %d", got)
	}
	if err := a.Release(ctxT(t, 5*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-freed:
		if n.Name != "x" {
			t.Fatalf("notice = %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notice for x within 5s of its release")
	}
	if got := acquire(t, b, sb.ID, "x")[0].Token; got <= tok {
		t.Fatalf("token = %d, want > %d", got, tok)
	}
}

func TestUnknownSessionIsExpired(t *testing.T) {
	b := newBackend(t, standalone(t), newRoot(t))
	_, err := b.Renew(ctxT(t, 5*time.Second), driver.RenewRequest{ID: "0x0000000000000001"})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew(unknown) = %v, want ErrExpired", err)
	}
	_, err = b.Acquire(ctxT(t, 5*time.Second), driver.AcquireRequest{ID: "nope", Names: []string{"x"}})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Acquire(unknown) = %v, want ErrExpired", err)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []string
		root    string
		opts    []zksimba.Option
		want    error
	}{
		{"no servers", nil, "/a", nil, zksimba.ErrInvalidOption},
		{"relative root", []string{"x:1"}, "a", nil, zksimba.ErrInvalidRoot},
		{"zookeeper subtree", []string{"x:1"}, "/zookeeper/a", nil, zksimba.ErrInvalidRoot},
		{"bad user", []string{"x:1"}, "/a", []zksimba.Option{zksimba.WithDigestAuth("a:b", "p")}, zksimba.ErrInvalidOption},
		{"empty acl", []string{"x:1"}, "/a", []zksimba.Option{zksimba.WithACL()}, zksimba.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := zksimba.New(tc.servers, tc.root, tc.opts...); !errors.Is(err, tc.want) {
				t.Fatalf("New = %v, want %v", err, tc.want)
			}
		})
	}
}

// countingConn counts the writes (one per request frame) on a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	// A request frame: length, xid, opcode. Opcode 3 is exists.
	if len(p) < 12 || binary.BigEndian.Uint32(p[8:12]) != 3 {
		c.n.Add(1)
	}
	return c.Conn.Write(p)
}

func equalLeases(a, b []driver.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// One Acquire carries many names; the backend pipelines them on the
// session's connection (bounded), and one Renew reports them all.
func TestLargeBatch(t *testing.T) {
	var writes atomic.Int64
	b := newBackend(t, standalone(t), newRoot(t), zksimba.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}))
	s := open(t, b, 20*time.Second)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("n%04d", i)
	}
	res := acquire(t, b, s.ID, names...)
	seen := map[uint64]bool{}
	for i, r := range res {
		if r.Name != names[i] || r.Token == 0 || r.Err != nil || seen[r.Token] {
			t.Fatalf("result %d = %+v, want %s with a fresh token", i, r, names[i])
		}
		seen[r.Token] = true
	}
	before := writes.Load()
	if rr := renew(t, b, s.ID); len(rr.Leases) != len(names) {
		t.Fatalf("Renew lists %d leases, want %d", len(rr.Leases), len(names))
	}
	// go-zookeeper writes one frame per request. Frames other than the
	// exists watches Acquire arms on the new nodes in the background are
	// the renewal's: exactly one.
	if n := writes.Load() - before; n != 1 {
		t.Fatalf("Renew with %d leases sent %d requests (besides background exists), want 1", len(names), n)
	}
	leases := make([]driver.Lease, len(res))
	for i, r := range res {
		leases[i] = driver.Lease{Name: r.Name, Token: r.Token}
	}
	if err := b.Release(ctxT(t, 30*time.Second), driver.ReleaseRequest{ID: s.ID, Leases: leases}); err != nil {
		t.Fatal(err)
	}
	if rr := renew(t, b, s.ID); len(rr.Leases) != 0 {
		t.Fatalf("Renew after releasing all lists %d leases", len(rr.Leases))
	}
}

// Open honours its context when no server answers, and returns without
// waiting for go-zookeeper to give up on the connection.
func TestOpenNoServerHonoursContext(t *testing.T) {
	port := freePorts(t, 1)[0] // nothing listens there
	b := newBackendNoInit(t, []string{fmt.Sprintf("127.0.0.1:%d", port)}, newRoot(t))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: 2 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open with no server = %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 800*time.Millisecond {
		t.Fatalf("Open returned %v after its 300ms context ended", el)
	}
}
