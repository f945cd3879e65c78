package zksimba_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// lossy is a dialer whose connections pass everything until a test arms
// a trap: the first request written whose bytes contain it is then either
// sent and its reply lost (the connection goes deaf and is closed a moment
// later, as when the server it talks to dies after applying the request)
// or not sent at all (the connection is closed before it leaves).
type lossy struct {
	mu      sync.Mutex
	trap    []byte
	dropReq bool
	fired   chan struct{}
}

func (l *lossy) arm(trap []byte, dropRequest bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trap, l.dropReq, l.fired = trap, dropRequest, make(chan struct{})
}

func (l *lossy) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
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

var errLost = errors.New("test: connection lost")

func (c *lossyConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	fire := c.l.trap != nil && bytes.Contains(p, c.l.trap)
	drop, fired := c.l.dropReq, c.l.fired
	if fire {
		c.l.trap = nil
	}
	c.l.mu.Unlock()
	if !fire {
		return c.Conn.Write(p)
	}
	defer close(fired)
	if drop {
		c.Conn.Close()
		return 0, errLost
	}
	n, err := c.Conn.Write(p)
	c.once.Do(func() { close(c.deaf) })
	return n, err
}

// Read swallows whatever arrives once the connection is deaf (the reply
// to the trapped request), for long enough that the server has applied
// it, then closes the connection.
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
	return 0, errLost
}

// zkString is a string as ZooKeeper's wire format writes it.
func zkString(s string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(s)))
	return append(b, s...)
}

// A candidate probing a name in its lock-delay (a lease node of its own
// made to learn the server's time, ADR 0257) that loses the reply of the
// probe, or cannot delete the probe, is left with a node of its session
// under the name. That node is no term: the next Acquire, or the next
// renewal that settles the uncertain name, must not make it one inside the
// delay.
func TestLostProbeIsNoTerm(t *testing.T) {
	const delay = 5 * time.Second
	for _, how := range []string{"probe reply lost", "probe delete lost", "probe reply lost, nobody retries"} {
		t.Run(how, func(t *testing.T) {
			srv, root := standalone(t), newRoot(t)
			ha := newBackend(t, srv, root, zksimba.WithMaxLockDelay(4*delay))
			hb := newBackendNoInit(t, srv, root, zksimba.WithMaxLockDelay(4*delay))
			l := &lossy{}
			hc := newBackendNoInit(t, srv, root, zksimba.WithMaxLockDelay(4*delay), zksimba.WithDialer(l.dial))
			raw := rawConn(t, srv)
			a, b, c := open(t, ha, 10*time.Second), open(t, hb, 10*time.Second), open(t, hc, 10*time.Second)
			keepAlive(t, hb, b.ID, time.Second)
			t1 := acquireDelay(t, ha, a.ID, "job", delay)
			if t1 == 0 {
				t.Fatal("first acquisition refused")
			}
			// The term ends without a release (an operator deletes its
			// node); the first candidate writes the end down.
			if err := raw.Delete(root+"/job", -1); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			if tok := acquireDelay(t, hb, b.ID, "job", 0); tok != 0 {
				t.Fatalf("granted %d at once after the end", tok)
			}
			if how != "probe delete lost" {
				// The probe multi: the only request with a version check
				// of the marker (multi header: check, not done, err -1).
				trap := append([]byte{0, 0, 0, 13, 0, 0xff, 0xff, 0xff, 0xff}, zkString(root+"/@delay/job")...)
				l.arm(trap, false)
			} else {
				// The probe's delete: the node at data version 1.
				l.arm(binary.BigEndian.AppendUint32(zkString(root+"/job"), 1), true)
			}
			fired := l.fired
			_, _ = hc.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: c.ID, Names: []string{"job"}})
			select {
			case <-fired:
			case <-time.After(5 * time.Second):
				t.Fatal("the probe was never sent")
			}
			if how == "probe reply lost, nobody retries" {
				// The caller gives up on the name (a TryAcquire that
				// failed); its session lives on. The probe must not hold
				// the name past the delay for the session's life.
				keepAlive(t, hc, c.ID, time.Second)
				tok, at, _, _ := waitGrant(t, []candidate{{hb, b.ID}}, "job", 3*delay)
				if at.Sub(ended) < delay || tok <= t1 {
					t.Errorf("granted token %d (after %d) %v after the end, delay %v", tok, t1, at.Sub(ended), delay)
				}
				return
			}
			var err error
			for end := time.Now().Add(delay / 2); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				var r driver.AcquireReply
				if how == "probe delete lost" {
					var rr driver.RenewReply
					rr, err = hc.Renew(ctxT(t, 5*time.Second), driver.RenewRequest{ID: c.ID})
					for _, got := range rr.Leases {
						if got.Name == "job" && time.Since(ended) < delay {
							t.Fatalf("the renewal reports job owned (token %d) %v after the end, inside the delay of %v", got.Token, time.Since(ended), delay)
						}
					}
					if err != nil {
						continue
					}
				}
				r, err = hc.Acquire(ctxT(t, 5*time.Second), driver.AcquireRequest{ID: c.ID, Names: []string{"job"}})
				if err != nil {
					continue
				}
				if tok := r.Results[0].Token; tok != 0 && time.Since(ended) < delay {
					t.Fatalf("granted token %d %v after the end, inside the delay of %v", tok, time.Since(ended), delay)
				}
				if r.Results[0].Token == 0 {
					break
				}
			}
			if err != nil {
				t.Fatalf("still failing after the lost request: %v", err)
			}
			tok, at, _, _ := waitGrant(t, []candidate{{hc, c.ID}}, "job", 3*delay)
			if at.Sub(ended) < delay || tok <= t1 {
				t.Errorf("granted token %d (after %d) %v after the end, delay %v", tok, t1, at.Sub(ended), delay)
			}
		})
	}
}
