package election_test

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func ExampleLeaderOf() {
	b, _ := memory.New()
	node, _ := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil),
		session.WithIdentity("billing-1", map[string]string{"status": "http://10.0.0.7:8080/simba"}))
	defer node.Close()
	elected := make(chan *term.Term, 1)
	e, _ := election.Start(node, "billing", election.WithListener(election.Funcs{Elected: func(t *term.Term) { elected <- t }}))
	defer e.Close()
	<-elected

	// Another process asks who leads, without campaigning.
	other, _ := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil))
	defer other.Close()
	h, ok, err := election.LeaderOf(context.Background(), other, "billing")
	fmt.Println(ok, err, h.Owner.Identity, h.Owner.Metadata["status"], h.Token)
	// Output:
	// true <nil> billing-1 http://10.0.0.7:8080/simba 1
}

func ExampleObserve() {
	b, _ := memory.New()
	watcher, _ := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil))
	defer watcher.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := election.Observe(ctx, watcher, "billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", (<-changes).Held)

	node, _ := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil), session.WithIdentity("billing-1", nil))
	defer node.Close()
	e, _ := election.Start(node, "billing")
	defer e.Close()
	o := <-changes // seen at the next poll (one renewal period)
	fmt.Println("held:", o.Held, "by", o.Holder.Owner.Identity, "term", o.Holder.Token)
	// Output:
	// held: false
	// held: true by billing-1 term 1
}
