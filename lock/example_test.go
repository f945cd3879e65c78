package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

func ExampleAcquire() {
	b, _ := memory.New() // in production: a PostgreSQL, MySQL, Redis or ZooKeeper backend
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := lock.Acquire(ctx, s, "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	if err := h.EnsureValid(time.Second); err == nil {
		fmt.Println("holding the lock with fencing token", h.Token())
	}
	// Output: holding the lock with fencing token 1
}

func ExampleTryAcquire() {
	b, _ := memory.New()
	s1, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s1.Close()
	s2, _ := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil))
	defer s2.Close()

	h, _ := lock.TryAcquire(context.Background(), s1, "nightly-report")
	defer h.Close()
	_, err := lock.TryAcquire(context.Background(), s2, "nightly-report")
	fmt.Println(err)
	// Output: simba: lock held by another session: "nightly-report"
}

// A lock with a lock-delay: when its holder's session expires without a
// release (a paused process), nobody gets the lock for the delay, measured
// by the backend's clock; Close would have freed it at once.
func ExampleWithLockDelay() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Unix(0, 0)) // the backend's clock, moved by hand
	b, _ := memory.New(memory.WithClock(clock), memory.WithMaxLockDelay(10*time.Second))
	s1, _ := session.Open(ctx, b, session.WithLogger(nil))
	defer s1.Close()
	s2, _ := session.Open(ctx, b.NewClient(), session.WithLogger(nil))
	defer s2.Close()

	h, _ := lock.Acquire(ctx, s1, "ledger", lock.WithLockDelay(10*time.Second))
	b.Expire(s1.ID()) // s1 froze: the backend ended its session
	_, err := lock.TryAcquire(ctx, s2, "ledger")
	fmt.Println(err)

	clock.Advance(10 * time.Second)
	h2, err := lock.TryAcquire(ctx, s2, "ledger")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h2.Close()
	fmt.Println("acquired after the delay, token above the old one:", h2.Token() > h.Token())

	_, err = lock.TryAcquire(ctx, s2, "audit", lock.WithLockDelay(time.Minute))
	fmt.Println("above the backend's maximum:", errors.Is(err, session.ErrLockDelay))
	// Output:
	// simba: lock held by another session: "ledger"
	// acquired after the delay, token above the old one: true
	// above the backend's maximum: true
}
