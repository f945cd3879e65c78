package zksimba_test

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// syncBuf is a log sink tests read while the backend writes to it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A standalone server that pauses for less than a grant costs nothing.
// Its connection is closed as stalled, and go-zookeeper waited a second
// before it dialled the one address again, so a renewal sent at the pause
// came back only after the grant had run out (ADR 0177 said "redialled a
// little earlier, which changes nothing"). The redial after a stall is
// now at once (ADR 0222).
func TestStandalonePauseShorterThanAGrantCostsNothing(t *testing.T) {
	zks := startZK(t, 1)
	var logs syncBuf
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const timeout = 3 * time.Second // stall limit 300 ms, grant 1.25 s
	b := newBackend(t, addrs(zks), newRoot(t), zksimba.WithLogger(logger))
	s := open(t, b, timeout)
	renew(t, b, s.ID)

	const pause = 600 * time.Millisecond
	zks[0].pause()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := b.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: s.ID})
		done <- err
	}()
	<-time.After(pause)
	zks[0].resume()
	must(t, <-done)
	took := time.Since(start)
	if took >= zksimba.Grant(timeout) {
		t.Fatalf("a renewal sent as the only server paused for %v took %v, past the grant of %v (log: %s)", pause, took, zksimba.Grant(timeout), logs.String())
	}
	t.Logf("renewal across a %v pause of the only server took %v", pause, took)
}

// vip is one address in front of several servers, as a load balancer
// (a Kubernetes Service) puts it: each connection goes to the next one.
type vip struct {
	mu   sync.Mutex
	next int
	to   []string
}

func (v *vip) dial(network, _ string, timeout time.Duration) (net.Conn, error) {
	v.mu.Lock()
	addr := v.to[v.next%len(v.to)]
	v.next++
	v.mu.Unlock()
	return net.DialTimeout(network, addr, timeout)
}

// An ensemble behind one address: a stopped follower under the session
// still costs no term. The connection is closed as stalled and redialled
// at once, which reaches another server. (With one address, go-zookeeper
// waited a second before the redial: past the grant of a 3 s session.)
func TestStalledServerBehindOneAddressCostsNoTerm(t *testing.T) {
	zks := startZK(t, 3)
	v := &vip{to: addrs(zks)}
	const timeout = 3 * time.Second // stall limit 300 ms, grant 1.25 s
	b := newBackend(t, []string{"127.0.0.1:1"}, newRoot(t), zksimba.WithDialer(v.dial))
	var s driver.OpenReply
	var fol *zkServer
	for attempt := 0; fol == nil; attempt++ {
		if attempt == 20 {
			t.Fatal("no session landed on a follower in 20 attempts")
		}
		s = open(t, b, timeout)
		var z *zkServer
		waitUntil(t, 10*time.Second, "the server of the session", func() bool {
			z = serverOf(zks, s.ID)
			return z != nil
		})
		if z.mode() == "follower" {
			fol = z
		} else {
			must(t, b.Close(ctxT(t, 5*time.Second), s.ID))
		}
	}
	renew(t, b, s.ID)
	fol.pause()
	defer fol.resume()
	start := time.Now()
	renew(t, b, s.ID)
	if took := time.Since(start); took >= zksimba.Grant(timeout) {
		t.Fatalf("a renewal sent as the session's follower stopped took %v, past the grant of %v", took, zksimba.Grant(timeout))
	} else {
		t.Logf("renewal across the stopped follower took %v", took)
	}
}
