package etcdsimba_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// lossy is a dialer whose connections pass everything until a test arms
// a trap: the first write whose bytes contain it is sent, and its reply
// lost (the connection goes deaf and is closed a moment later, as when the
// member it talks to dies after applying the request).
type lossy struct {
	mu    sync.Mutex
	trap  []byte
	drop  bool // the trapped write is not sent: the request never reaches the server
	fired chan struct{}
}

func (l *lossy) arm(trap []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trap, l.drop, l.fired = trap, false, make(chan struct{})
}

// armDrop is arm for a request that is lost on its way: the first write
// containing trap is not sent, and its connection is closed (a member
// unreachable, a network blip).
func (l *lossy) armDrop(trap []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trap, l.drop, l.fired = trap, true, make(chan struct{})
}

func (l *lossy) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, l: l, deaf: make(chan struct{})}, nil
}

type lossyConn struct {
	net.Conn
	l    *lossy
	once sync.Once
	deaf chan struct{}
}

func (c *lossyConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	fire := c.l.trap != nil && bytes.Contains(p, c.l.trap)
	fired, drop := c.l.fired, c.l.drop
	if fire {
		c.l.trap = nil
	}
	c.l.mu.Unlock()
	if fire && drop {
		c.Conn.Close()
		close(fired)
		return 0, errors.New("test: request dropped")
	}
	n, err := c.Conn.Write(p)
	if fire {
		c.once.Do(func() { close(c.deaf) })
		close(fired)
	}
	return n, err
}

// Read swallows whatever arrives once the connection is deaf, for long
// enough that the server has applied the trapped request, then closes
// the connection.
func (c *lossyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	select {
	case <-c.deaf:
	default:
		return n, err
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for err == nil {
		_, err = c.Conn.Read(p)
	}
	c.Conn.Close()
	return 0, errors.New("test: connection lost")
}

// The candidate that starts a name's lock-delay (the delay key on a new
// etcd lease, ADR 0256) and loses the reply of that transaction does not
// know whether the delay started. Revoking the new lease then would end
// the delay at once, if the transaction was applied: the name must stay
// refused for the delay.
func TestLostDelayStartKeepsTheDelay(t *testing.T) {
	// 8 s, watched until 0.5 s before its end: a revoke of the new lease
	// (the defect) must land inside the watch even when the lost reply
	// and the client's reconnect take seconds on a loaded machine.
	const delay = 8 * time.Second
	cli := newClient(t, single(t))
	l := &lossy{}
	lcli, err := clientv3.New(clientv3.Config{Endpoints: single(t), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(l.dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lcli.Close() })
	ns := newNamespace(t)
	// WithoutRevokeGuard: this test measures the lock-delay itself; the
	// guard (on by default on the tests' etcd 3.4.23, ADR 0305) would raise
	// it to the session's 10 s lease (its own delay is
	// TestRevokeGuardHoldsANameRevokedEarly's).
	opts := []etcdsimba.Option{etcdsimba.WithMaxLockDelay(4 * delay), etcdsimba.WithoutRevokeGuard()}
	ha := newBackend(t, cli, ns, opts...)
	hb := newBackendNoInit(t, lcli, ns, opts...)
	hc := newBackendNoInit(t, cli, ns, opts...)
	a, b, c := openDriver(t, ha, 10*time.Second), openDriver(t, hb, 10*time.Second), openDriver(t, hc, 10*time.Second)
	t1 := acquireOne(t, ha, a, "job", delay)
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
	l.arm([]byte("@lock-delay"))
	fired := l.fired
	_, _ = hb.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: b, Names: []string{"job"}})
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the delay's transaction was never sent")
	}
	for time.Since(ended) < delay-500*time.Millisecond {
		for _, cd := range []struct {
			b  *etcdsimba.Backend
			id driver.ID
		}{{hb, b}, {hc, c}} {
			r, err := cd.b.Acquire(ctxT(t, 5*time.Second), driver.AcquireRequest{ID: cd.id, Names: []string{"job"}})
			if err != nil {
				continue
			}
			if tok := r.Results[0].Token; tok != 0 && time.Since(ended) < delay {
				t.Fatalf("granted token %d %v after the end, inside the delay of %v", tok, time.Since(ended), delay)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for end := time.Now().Add(3 * delay); ; time.Sleep(100 * time.Millisecond) {
		if tok := acquireOne(t, hc, c, "job", 0); tok != 0 {
			if time.Since(ended) < delay || tok <= t1 {
				t.Errorf("granted token %d (after %d) %v after the end, delay %v", tok, t1, time.Since(ended), delay)
			}
			return
		}
		if time.Now().After(end) {
			t.Fatalf("still refused %v after the end (delay %v)", time.Since(ended), delay)
		}
	}
}
