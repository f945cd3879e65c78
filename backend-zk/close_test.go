package zksimba_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
)

// staller dials ordinary connections and can make the open ones go
// silent (writes dropped), as a connection is after its process was
// frozen past the client's read deadline: the client still thinks it is
// up, the server hears nothing. New connections work.
type staller struct {
	mu    sync.Mutex
	conns []*stallConn
}

type stallConn struct {
	net.Conn
	stalled atomic.Bool
}

func (c *stallConn) Write(p []byte) (int, error) {
	if c.stalled.Load() {
		return len(p), nil // lost on the way
	}
	return c.Conn.Write(p)
}

func (s *staller) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	sc := &stallConn{Conn: c}
	s.mu.Lock()
	s.conns = append(s.conns, sc)
	s.mu.Unlock()
	return sc, nil
}

// stall silences every connection dialled so far.
func (s *staller) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.stalled.Store(true)
	}
}

// Close of a session whose connection has gone silent (after a pause, the
// client's connection is dead or being redialled when the engine abandons
// the session) still ends it at the server at once: the leases go, the
// candidates' watches fire. go-zookeeper's own close is lost on such a
// connection, and the lease stayed held until the server expired the
// session, up to a whole timeout later (issue 10: failover took up to two
// leases after a 1.6–1.85 s freeze).
func TestCloseOverSilentConnectionEndsTheSession(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const timeout = 6 * time.Second
	st := &staller{}
	a := newBackend(t, srv, root, zksimba.WithDialer(st.dial))
	sa := open(t, a, timeout)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	b := newBackend(t, srv, root)
	sb := open(t, b, timeout)
	keepAlive(t, b, sb.ID, time.Second)
	freed := notices(t, b, "x")
	if got := acquire(t, b, sb.ID, "x")[0].Token; got != 0 {
		t.Fatalf("b took a held lease: %d", got)
	}

	st.stall()
	closedAt := time.Now()
	_ = a.Close(ctxT(t, 3*time.Second), sa.ID) // may time out: the close goes on
	select {
	case <-freed:
	case <-time.After(2 * time.Second):
		t.Fatalf("lease still held %v after Close over a silent connection: the session was not ended at the server (it expires %v after its last ping)", time.Since(closedAt), timeout)
	}
	t.Logf("lease freed %v after Close", time.Since(closedAt))
	if got := acquire(t, b, sb.ID, "x")[0].Token; got <= tok {
		t.Fatalf("b's token %d after the close, want > %d", got, tok)
	}
}
