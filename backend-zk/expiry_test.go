package zksimba_test

import (
	"errors"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// A holder whose connection is cut keeps its lease until the server
// expires its session; the waiting candidate's watch then fires at once.
// The old session answers ErrExpired forever, even once the network is
// back, and never continues as a new ZooKeeper session.
func TestCutHolderExpiresAndWatchHandsOver(t *testing.T) {
	srv := standalone(t)
	root := newRoot(t)
	cut := &cutter{}
	a := newBackend(t, srv, root, zksimba.WithDialer(cut.dial))
	b := newBackend(t, srv, root)
	const timeout = 2 * time.Second
	sa, sb := open(t, a, timeout), open(t, b, timeout)
	keepAlive(t, b, sb.ID, timeout/5)
	tokA := acquire(t, a, sa.ID, "x")[0].Token
	freed := notices(t, b, "x")
	if got := acquire(t, b, sb.ID, "x")[0].Token; got != 0 {
		t.Fatalf("b acquired a held lease: %d", got)
	}

	cfg := deadline.Config{LeaseDuration: timeout}.WithDefaults()
	sentAt := time.Now()
	rr := renew(t, a, sa.ID)
	localDeadline := cfg.Deadline(sentAt, rr.Remaining)
	cut.Cut()
	cutAt := time.Now()

	select {
	case <-freed:
	case <-time.After(3 * timeout):
		t.Fatalf("no notice within %v of cutting the holder", 3*timeout)
	}
	noticed := time.Now()
	if !noticed.After(localDeadline) {
		t.Fatalf("lease freed %v before the holder's local deadline", localDeadline.Sub(noticed))
	}
	// The server expires the session timeout after it last heard of it,
	// on a tick boundary; the watch reports it a round trip later.
	if el := noticed.Sub(cutAt); el < timeout-2*testTick || el > timeout+time.Second {
		t.Fatalf("takeover %v after the cut, want about the session timeout %v", el, timeout)
	}
	tokB := acquire(t, b, sb.ID, "x")[0].Token
	if tokB <= tokA {
		t.Fatalf("takeover token %d, want > %d", tokB, tokA)
	}

	cut.Heal()
	// Back on the network, go-zookeeper reconnects and learns the session
	// expired: the backend must say so and stay so.
	waitUntil(t, 10*time.Second, "old session to report ErrExpired", func() bool {
		_, err := a.Renew(ctxT(t, time.Second), driver.RenewRequest{ID: sa.ID})
		return errors.Is(err, driver.ErrExpired)
	})
	for i := 0; i < 3; i++ {
		if _, err := a.Renew(ctxT(t, time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("Renew of the expired session = %v, want ErrExpired forever", err)
		}
		if _, err := a.Acquire(ctxT(t, time.Second), driver.AcquireRequest{ID: sa.ID, Names: []string{"y"}}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("Acquire on the expired session = %v, want ErrExpired", err)
		}
	}
	sa2 := open(t, a, timeout)
	if sa2.ID == sa.ID {
		t.Fatalf("new session reuses id %s", sa.ID)
	}
	if got := acquire(t, a, sa2.ID, "x")[0].Token; got != 0 {
		t.Fatalf("new session of a took x from b: %d", got)
	}
}
