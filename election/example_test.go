package election_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func ExampleStart() {
	b, _ := memory.New() // in production: a PostgreSQL, MySQL, Redis or ZooKeeper backend
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	elected := make(chan *term.Term, 1)
	e, err := election.Start(s, "billing-leader", election.WithListener(election.Funcs{
		Elected: func(t *term.Term) { elected <- t },
		Revoked: func(t *term.Term, r term.RevokeReason) { fmt.Println("revoked", t, r.String()) },
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	t := <-elected
	fmt.Println("elected", t, e.Status())
	_ = e.Stop(context.Background())
	fmt.Println(e.Status())
	// Output:
	// elected billing-leader#1 LEADER
	// revoked billing-leader#1 STOPPED
	// STOPPED
}

func ExampleRunWhileLeader() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	started := make(chan struct{})
	e, _ := election.Start(s, "indexer", election.RunWhileLeader(func(ctx context.Context, t *term.Term) error {
		fmt.Println("indexing as", t)
		close(started)
		<-ctx.Done() // leadership ended: stop writing
		fmt.Println("stopped:", context.Cause(ctx).(term.RevokeReason).String())
		return nil
	}))
	<-started
	_ = e.Stop(context.Background()) // returns after the task returned and the lease was released
	// Output:
	// indexing as indexer#1
	// stopped: STOPPED
}

func ExampleEvery() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	ran := make(chan uint64, 1)
	e, _ := election.Start(s, "cleanup", election.Every(time.Hour, func(ctx context.Context, t *term.Term) error {
		select {
		case ran <- t.Token(): // only the leader runs it, every hour, never overlapping
		default:
		}
		return nil
	}, nil))
	fmt.Println("first run under token", <-ran)
	_ = e.Stop(context.Background())
	// Output: first run under token 1
}

func ExampleElection_StepDown() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	elected := make(chan struct{})
	e, _ := election.Start(s, "scheduler", election.WithListener(election.Funcs{
		Elected: func(*term.Term) { close(elected) },
	}))
	<-elected
	// Before a deploy: move leadership off this node for a minute.
	_ = e.StepDown(context.Background(), time.Minute)
	fmt.Println(e.Status())
	_ = e.Stop(context.Background())
	// Output: COOLDOWN
}

func ExampleWaitFirstAttempt() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	// Start returns once the backend has answered the first attempt: a
	// caller that waits for the term anyway saves two goroutine hops.
	won := make(chan *term.Term, 1)
	e, _ := election.Start(s, "compactor",
		election.WaitFirstAttempt(context.Background()),
		election.OnWon(func(t *term.Term) { won <- t }))
	select {
	case t := <-won:
		fmt.Println("won", t, "before Start returned")
	default:
		fmt.Println("not won yet")
	}
	_ = e.Stop(context.Background())
	// Output:
	// won compactor#1 before Start returned
}

// An election whose terms ask the backend for a lock-delay: if the leader's
// session ends without a release, no other node leads for 15s. A delay the
// backend does not honour (above its WithMaxLockDelay) stops the election
// with an error instead of a candidate that never wins.
func ExampleWithLockDelay() {
	ctx := context.Background()
	b, _ := memory.New(memory.WithMaxLockDelay(15 * time.Second))
	s, _ := session.Open(ctx, b, session.WithLogger(nil))
	defer s.Close()

	e, err := election.Start(s, "ledger-writer", election.WithLockDelay(15*time.Second), election.WaitFirstAttempt(ctx))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	fmt.Println(e.Status())

	_, err = election.Start(s, "audit-writer", election.WithLockDelay(time.Minute), election.WaitFirstAttempt(ctx))
	fmt.Println("above the backend's maximum:", errors.Is(err, session.ErrLockDelay))
	// Output:
	// LEADER
	// above the backend's maximum: true
}
