package term_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/term"
)

type hour struct{}

func (hour) Remaining() time.Duration { return time.Hour }

func ExampleTerm_EnsureValid() {
	// Terms come from an election or a lock; term.New is for the engine.
	t, revoke := term.New(context.Background(), "billing", 17, hour{})
	if err := t.EnsureValid(time.Second); err == nil {
		fmt.Println("write with fencing token", t.Token())
	}
	revoke(term.TakenOver)
	err := t.EnsureValid(time.Second)
	fmt.Println(errors.Is(err, term.ErrExpired), errors.Is(err, term.TakenOver))
	fmt.Println(context.Cause(t.Context()))
	// Output:
	// write with fencing token 17
	// true true
	// simba: term revoked: TAKEN_OVER
}
