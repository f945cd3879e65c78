package zksimba_test

import (
	"sync"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// waitForX opens a holder of "x" and a waiter whose failed Acquire arms a
// watch on it, both on b; it returns a function that releases x, which
// delivers Notice{"x"} to b's subscribers, and the waiter.
func waitForX(t *testing.T, b *zksimba.Backend) (releaseX func(), waiter driver.ID) {
	t.Helper()
	h, w := open(t, b, 4*time.Second), open(t, b, 4*time.Second)
	tok := acquire(t, b, h.ID, "x")[0].Token
	if got := acquire(t, b, w.ID, "x")[0].Token; tok == 0 || got != 0 {
		t.Fatalf("x: holder token %d, waiter token %d", tok, got)
	}
	return func() {
		if err := b.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: h.ID, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
			t.Fatal(err)
		}
	}, w.ID
}

// A subscriber may stop its own subscription from its function. Notices
// used to run on go-zookeeper's receive loop under the subscription lock,
// which stop also takes: the connection deadlocked.
func TestSubscriberMayStopItself(t *testing.T) {
	b := newBackend(t, standalone(t), newRoot(t))
	releaseX, waiter := waitForX(t, b)
	stopCh := make(chan func(), 1)
	done := make(chan struct{})
	stop, err := b.Subscribe(func(n driver.Notice) {
		if n.Name == "x" {
			(<-stopCh)()
			close(done)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	stopCh <- stop
	releaseX()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber stopping itself did not return")
	}
	renew(t, b, waiter) // the connection still works
}

// A slow subscriber delays no renewal: the waiter's renewal is answered
// while the subscriber still holds its notice. It used to hold
// go-zookeeper's receive loop, and with it the renewal's reply.
func TestSlowSubscriberDoesNotDelayRenewal(t *testing.T) {
	b := newBackend(t, standalone(t), newRoot(t))
	releaseX, waiter := waitForX(t, b)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once // both sessions' watches tell of x
	stop, err := b.Subscribe(func(n driver.Notice) {
		if n.Name == "x" {
			once.Do(func() { close(entered) })
			<-unblock
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	defer close(unblock)
	releaseX()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no notice for x")
	}
	if _, err := b.Renew(ctxT(t, 3*time.Second), driver.RenewRequest{ID: waiter}); err != nil {
		t.Fatalf("Renew while a subscriber holds a notice: %v", err)
	}
}
