package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

func ExampleNew() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Unix(0, 0))
	b, err := memory.New(memory.WithClock(clock))
	if err != nil {
		panic(err)
	}
	s, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 15 * time.Second})
	acq, _ := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{"leader"}})
	fmt.Println("token:", acq.Results[0].Token)

	clock.Advance(10 * time.Second)
	r, _ := b.Renew(ctx, driver.RenewRequest{ID: s.ID})
	fmt.Println("remaining after renewal:", r.Remaining, "owned:", r.Leases)

	clock.Advance(15 * time.Second) // no renewal for a whole lease
	_, err = b.Renew(ctx, driver.RenewRequest{ID: s.ID})
	fmt.Println("expired:", errors.Is(err, driver.ErrExpired))
	// Output:
	// token: 1
	// remaining after renewal: 15s owned: [{leader 1}]
	// expired: true
}

// Fault injection: a lost reply, then a backend that stops answering.
func ExampleBackend_DropReplies() {
	ctx := context.Background()
	b, _ := memory.New()
	s, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 15 * time.Second})

	b.DropReplies(1)
	_, err := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{"leader"}})
	owner, token, _ := b.Owner("leader")
	fmt.Println(errors.Is(err, memory.ErrReplyLost), owner == s.ID, token)

	b.FailCalls(errors.New("connection refused"))
	_, err = b.Renew(ctx, driver.RenewRequest{ID: s.ID})
	fmt.Println(err)
	fmt.Println(b.Stats().Renew)
	// Output:
	// true true 1
	// memory: renew: connection refused
	// 1
}

// After a data loss the backend grants nothing for one maximum lease, so
// that no session still believing in a term from before the loss overlaps
// a new one.
func ExampleBackend_LoseData() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Unix(0, 0))
	b, _ := memory.New(memory.WithClock(clock), memory.WithMaxLease(10*time.Second))
	old, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 10 * time.Second})
	_, _ = b.Acquire(ctx, driver.AcquireRequest{ID: old.ID, Names: []string{"leader"}})

	b.LoseData(false)
	s, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 10 * time.Second})
	acq, _ := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{"leader"}})
	fmt.Println("token:", acq.Results[0].Token, "quarantine:", acq.Quarantine)

	clock.Advance(5 * time.Second)
	_, _ = b.Renew(ctx, driver.RenewRequest{ID: s.ID})
	clock.Advance(5 * time.Second)
	acq, _ = b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{"leader"}})
	fmt.Printf("token: %#x quarantine: %v\n", acq.Results[0].Token, acq.Quarantine)
	// Output:
	// token: 0 quarantine: 10s
	// token: 0x10000000001 quarantine: 0s
}

// A namespace that starts uninitialised, as a new Redis or ZooKeeper one
// does, is quarantined at its first use unless Init created it.
func ExampleBackend_Init() {
	ctx := context.Background()
	b, _ := memory.New(memory.WithUninitialisedNamespace())
	if err := b.Init(ctx); err != nil {
		panic(err)
	}
	s, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 15 * time.Second})
	acq, _ := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{"leader"}})
	fmt.Println("token:", acq.Results[0].Token, "quarantine:", acq.Quarantine)
	// Output:
	// token: 1 quarantine: 0s
}

// A lock-delay on the backend's clock: the term's session expires without
// a release, and the name stays refused (token 0, as held) for the delay.
func ExampleWithMaxLockDelay() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Unix(0, 0))
	b, _ := memory.New(memory.WithClock(clock), memory.WithMaxLockDelay(15*time.Second))
	a, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: 10 * time.Second})
	_, _ = b.Acquire(ctx, driver.AcquireRequest{ID: a.ID, Names: []string{"ledger"}, LockDelay: 15 * time.Second})

	clock.Advance(10 * time.Second) // a stops renewing: expired at 10s
	c, _ := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Minute})
	try := func() uint64 {
		r, _ := b.Acquire(ctx, driver.AcquireRequest{ID: c.ID, Names: []string{"ledger"}})
		return r.Results[0].Token
	}
	fmt.Println("at 10s:", try())
	clock.Advance(15*time.Second - time.Millisecond)
	fmt.Println("at 25s - 1ms:", try())
	clock.Advance(time.Millisecond)
	fmt.Println("at 25s:", try())

	_, err := b.Acquire(ctx, driver.AcquireRequest{ID: c.ID, Names: []string{"other"}, LockDelay: time.Minute})
	fmt.Println(errors.Is(err, driver.ErrLockDelay))
	// Output:
	// at 10s: 0
	// at 25s - 1ms: 0
	// at 25s: 2
	// true
}
