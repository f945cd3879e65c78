package redissimba_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// Shutdown stops the subscription (no notice is delivered afterwards),
// Subscribe then refuses with ErrClosed, and the client stays usable: the
// backend still answers sessions through it.
func TestShutdownStopsTheSubscriber(t *testing.T) {
	b := newBackend(t, standalone(t), namespace(t))
	var calls atomic.Int64
	stop, err := b.Subscribe(func(driver.Notice) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	stop() // after Shutdown: harmless
	before := calls.Load()
	id := open(t, b, 5*time.Second)
	release(t, b, id, "x", acquire(t, b, id, "x")[0])
	if _, err := b.Subscribe(func(driver.Notice) {}); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Subscribe after Shutdown = %v, want ErrClosed", err)
	}
	if n := calls.Load(); n != before {
		t.Fatalf("a subscriber was called %d times after Shutdown", n-before)
	}
}
