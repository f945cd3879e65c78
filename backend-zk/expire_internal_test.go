package zksimba

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// When the server has expired the session while the client was away (here
// with the watchdog stopped, as in a process that was paused as a whole),
// the reconnect's connect response says so: the backend must mark the
// session expired and must not let go-zookeeper open a new session on the
// same connection.
func TestReconnectToExpiredSessionIsFinal(t *testing.T) {
	srv := os.Getenv("SIMBA_ZK_SERVERS")
	if srv == "" {
		t.Fatal("SIMBA_ZK_SERVERS is not set: run `make services` and `. .services/env`")
	}
	var (
		mu        sync.Mutex
		cut       bool
		conns     []net.Conn
		afterGone int             // dials attempted after the session ended
		gone      <-chan struct{} // set once the session is open
	)
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if gone != nil {
			select {
			case <-gone:
				afterGone++
			default:
			}
		}
		if cut {
			return nil, errors.New("test: network cut")
		}
		c, err := net.DialTimeout(network, addr, timeout)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	b, err := New(strings.Split(srv, ","), fmt.Sprintf("/simba-test/internal-expiry-%x", time.Now().UnixNano()),
		WithDialer(dial), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const timeout = time.Second
	r, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: timeout})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.lookup(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.stopWatchdog()
	conn := s.conn.Load()
	mu.Lock()
	gone = s.gone
	mu.Unlock()

	mu.Lock()
	cut = true
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	<-time.After(timeout + time.Second) // the server expires the session meanwhile
	if s.expired.Load() {
		t.Fatal("session marked expired before the client heard from the server")
	}
	mu.Lock()
	cut = false
	mu.Unlock()

	select {
	case <-s.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("reconnect did not report the session expired within 10s")
	}
	if _, err := b.Renew(ctx, driver.RenewRequest{ID: r.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew after the server expired the session = %v, want ErrExpired", err)
	}
	// Shutdown waits for the connection's Close; go-zookeeper would have
	// dialled again and opened a fresh session, setting a new non-zero id
	// on the same *zk.Conn.
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// go-zookeeper's connect loop sets the state on its own goroutine as
	// it exits, a moment after Close returns: wait for it, bounded.
	for end := time.Now().Add(15 * time.Second); conn.State() != zk.StateDisconnected; {
		if time.Now().After(end) {
			t.Fatalf("connection %v 15s after expiry and shutdown", conn.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	n := afterGone
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d dials after the session expired: the backend must not reconnect", n)
	}
	if id := conn.SessionID(); id != 0 {
		t.Fatalf("connection carries session %#x after expiry: go-zookeeper opened a new session", id)
	}
}
