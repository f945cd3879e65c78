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
