package lock_test

import (
	"context"
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
