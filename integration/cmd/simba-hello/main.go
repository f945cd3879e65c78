// Command simba-hello is the smallest program a Simba user writes: it elects
// itself leader of one name on Redis, prints the term's fencing token and
// steps down. It needs only the election and backend-redis modules.
//
// It is also the consumer that integration's TestConsumerOutsideWorkspace
// copies into a fresh module outside the workspace, to prove that the tagged
// modules can be fetched with `go get` and pull in nothing else: keep its
// imports to those two modules (and what they bring, go-redis included).
//
// Usage: simba-hello [-redis 127.0.0.1:6379] [-namespace hello] [-name leader] [-init]
//
// -init creates the namespace (redissimba's Backend.Init) before electing:
// pass it on a namespace's first run. Without it, the first election on a
// new namespace waits out the quarantine a lost namespace gets (one
// maximum lease, 30 s by default), since the two cannot be told apart.
// Never pass it to every start of a real application: after a data loss
// it would cancel the quarantine that keeps two leaders from overlapping.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	ns := flag.String("namespace", "hello", "Simba namespace on that Redis")
	name := flag.String("name", "leader", "the name to elect a leader for")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait to be elected")
	initNS := flag.Bool("init", false, "create the namespace first (its first run only)")
	flag.Parse()
	if err := run(context.Background(), *addr, *ns, *name, *wait, *initNS); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, ns, name string, wait time.Duration, initNS bool) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redissimba.New(rdb, ns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if initNS {
		if err := b.Init(ctx); err != nil {
			return err
		}
	}
	s, err := session.Open(ctx, b)
	if err != nil {
		return fmt.Errorf("open a session on Redis %s: %w", addr, err)
	}
	defer s.Close()
	elected := make(chan *term.Term, 1)
	e, err := election.Start(s, name, election.WithListener(election.Funcs{
		Elected: func(t *term.Term) { elected <- t },
	}))
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case t := <-elected:
		fmt.Printf("elected leader of %q with fencing token %d\n", t.Name(), t.Token())
	case <-ctx.Done():
		return fmt.Errorf("not elected leader of %q within %s", name, wait)
	}
	// Step down: release the lease now rather than letting it expire.
	return e.Stop(context.Background())
}
