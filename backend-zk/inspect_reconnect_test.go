// go-zookeeper v1.0.4 races on lastZxid when it sets watches again after a
// reconnect (sendSetWatches reads it while the new connection's receive
// loop writes it: go-zookeeper/zk PR #35, not in any served version), and
// this test is the one that reconnects a connection holding watches, so
// the race detector fails it now and then (1 run in 20). It is left out of
// -race builds and the Makefile's test target runs it without -race: the
// test runs in CI, only the detector is off for it (ADR 0159).

//go:build !race

package zksimba_test

import (
	"fmt"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// What was read before the read connection lost its server is read again:
// after a reconnect go-zookeeper sets the old watches again beside new
// requests, so a watch that has not fired proves nothing.
func TestInspectReadsAgainAfterReconnect(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	var names []string
	for i := range 50 {
		names = append(names, fmt.Sprintf("r:%d", i))
	}
	acquire(t, a, sa.ID, names...)
	rc := &readCounter{}
	c := newBackendNoInit(t, srv, root, zksimba.WithDialer(rc.dial))
	all := driver.InspectRequest{Prefix: "r:"}
	inspectBoth(t, c, rc, srv, root, all)
	if _, reads := inspectBoth(t, c, rc, srv, root, all); reads != 3 {
		t.Fatalf("Inspect with nothing changed: %d reads, want 3", reads)
	}
	rc.drop()
	// Requests in flight when the connection dropped fail; the first
	// Inspect that succeeds runs on the new connection.
	for attempt := 0; ; attempt++ {
		before := rc.reads.Load()
		hs, err := c.Inspect(ctxT(t, 10*time.Second), all)
		if err != nil {
			if attempt > 20 {
				t.Fatalf("Inspect after the reconnect: %v", err)
			}
			continue
		}
		if reads := rc.reads.Load() - before; len(hs) != 50 || reads < 50 {
			t.Fatalf("Inspect after a reconnect: %d holders in %d reads; want 50, every node read again", len(hs), reads)
		}
		break
	}
}

// The same by names: an Inspect by names lists nothing, so no listing's
// sweep drops what was read before the reconnect; the generation check
// must (mutation zk-inspect-cache-survives-reconnect survived the prefix
// Inspect above, whose relisting swept the old entries first).
func TestInspectByNameReadsAgainAfterReconnect(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("r:%d", i))
	}
	acquire(t, a, sa.ID, names...)
	rc := &readCounter{}
	c := newBackendNoInit(t, srv, root, zksimba.WithDialer(rc.dial))
	byName := driver.InspectRequest{Names: names}
	inspectBoth(t, c, rc, srv, root, byName)
	if _, reads := inspectBoth(t, c, rc, srv, root, byName); reads != 3 {
		t.Fatalf("Inspect by name with nothing changed: %d reads, want 3", reads)
	}
	rc.drop()
	for attempt := 0; ; attempt++ {
		before := rc.reads.Load()
		hs, err := c.Inspect(ctxT(t, 10*time.Second), byName)
		if err != nil {
			if attempt > 20 {
				t.Fatalf("Inspect after the reconnect: %v", err)
			}
			continue
		}
		if reads := rc.reads.Load() - before; len(hs) != len(names) || reads < int64(len(names)) {
			t.Fatalf("Inspect by name after a reconnect: %d holders in %d reads; want %d, every node read again", len(hs), reads, len(names))
		}
		break
	}
}
