package redissimba_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// A session on Redis with one election. Needs a Redis server, so it is
// compiled but not run; the tests run the same steps.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // calls must stop at the engine's deadline
	})
	defer rdb.Close()

	b, err := redissimba.New(rdb, "billing")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := session.Open(ctx, b)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	e, err := election.Start(s, "invoice-run", election.WithListener(election.Funcs{
		Elected: func(t *term.Term) { fmt.Println("leader with token", t.Token()) },
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
}

// A Redis Cluster works the same way: all keys of a namespace share one
// hash tag, so every operation runs on one node.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	if _, err := redissimba.New(rdb, "billing"); err != nil {
		log.Fatal(err)
	}
}

func ExampleValidateNamespace() {
	for _, ns := range []string{"billing", "team.a-1", "a{b}", ""} {
		fmt.Printf("%q: %v\n", ns, redissimba.ValidateNamespace(ns))
	}
	// Output:
	// "billing": <nil>
	// "team.a-1": <nil>
	// "a{b}": redissimba: invalid namespace: "a{b}" has byte '{' at offset 1 (want 1 to 64 characters of [A-Za-z0-9._-])
	// "": redissimba: invalid namespace: empty (want 1 to 64 characters of [A-Za-z0-9._-])
}

// New refuses a client that would let calls outlive the engine's deadline.
func ExampleNew_contextTimeout() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	_, err := redissimba.New(rdb, "billing")
	fmt.Println(err)
	// Output:
	// redissimba: unsuitable redis client: ContextTimeoutEnabled is false, so calls would not stop at the engine's deadline; set it in the client's options
}

// A leader fences its writes with its term's token, so a paused leader that
// wakes up after losing its term cannot overwrite its successor's work.
// Needs a Redis server, so it is compiled but not run.
func ExampleFencedSet() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	var t *term.Term // from OnElected
	err := redissimba.FencedSet(t.Context(), rdb, "{orders}:fence", "{orders}:latest", t.Token(), "order-42", 0)
	if errors.Is(err, redissimba.ErrFenced) {
		fmt.Println("a later leader has written; stop")
	}
}

// Who holds the leases of a namespace, without campaigning, and whether
// the server is set up safely. Needs a Redis server, so it is compiled but
// not run; the conformance kit and TestServerCheckWarns run the same calls.
func ExampleBackend_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redissimba.New(rdb, "billing")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	warnings, err := b.CheckServer(ctx)
	if err != nil {
		log.Fatal(err) // Redis older than 5.0
	}
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	holders, err := b.Inspect(ctx, driver.InspectRequest{Prefix: "invoice-"})
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range holders {
		fmt.Println(h.Name, "held by", h.Owner.Identity, "token", h.Token, "for", h.Remaining)
	}
}

// Every backend package shuts down the same way. On Redis, Shutdown stops
// the backend's pub/sub subscription; the client stays yours to close.
// Needs a Redis server, so it is compiled but not run.
func ExampleBackend_Shutdown() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close() // after Shutdown: the client is the application's

	b, err := redissimba.New(rdb, "billing")
	if err != nil {
		log.Fatal(err)
	}
	s, err := session.Open(context.Background(), b)
	if err != nil {
		log.Fatal(err)
	}
	_ = s.Close() // sessions first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
}

// A namespace's first deployment creates its epoch record, so that its
// first election is not quarantined like a namespace that lost its data.
// Run it once (here behind a flag), never at every start: after a data
// loss it would cancel the quarantine. Needs a Redis server, so it is
// compiled but not run; TestUninitialisedNamespaceQuarantined runs it.
func ExampleBackend_Init() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redissimba.New(rdb, "billing")
	if err != nil {
		log.Fatal(err)
	}
	firstDeployment := false // from the deployment's configuration
	if firstDeployment {
		if err := b.Init(context.Background()); err != nil {
			log.Fatal(err)
		}
	}
}

// Every process of a namespace caps its leases at the same maximum, which
// is also the quarantine after a data loss: a 10 s cap makes a FLUSHALL
// cost 10 s of no leader, and allows session leases up to 10 s. Needs a
// Redis server, so it is compiled but not run; TestMaxLeaseCapsGrants runs
// the same calls.
func ExampleWithMaxLease() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redissimba.New(rdb, "billing", redissimba.WithMaxLease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	s, err := session.Open(context.Background(), b) // the default 15 s lease is granted 10 s
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
}

// An election whose term, if the leader's session expires (a frozen
// process), keeps the name from every other candidate for 15 s on the Redis
// clock, so that a leader that wakes up and writes to a resource that
// cannot check a fencing token finds nobody else at work. Needs a Redis
// server, so it is compiled but not run; TestLockDelayAfterExpiry runs the
// same rule.
func ExampleWithMaxLockDelay() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redissimba.New(rdb, "billing", redissimba.WithMaxLockDelay(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	s, err := session.Open(context.Background(), b)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // a close, like a step-down's release, skips the delay
	e, err := election.Start(s, "invoice-run", election.WithLockDelay(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
}

// Behind Sentinel with one replica, every grant and renewal waits for the
// replica's acknowledgement, so a failover to it loses nothing a leader
// believes. Needs Sentinel, so it is compiled but not run;
// TestWaitReplicasCoversFailoverToStaleReplica runs it on a real replica.
func ExampleWithWaitReplicas() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{"127.0.0.1:26379"}, ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	b, err := redissimba.New(rdb, "billing", redissimba.WithWaitReplicas(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	_, err = session.Open(context.Background(), b)
	if errors.Is(err, redissimba.ErrReplicaLag) {
		fmt.Println("the replica is behind: no session until it catches up")
	}
}

// A deployment whose Redis cannot restart from an older state (appendonly
// yes, appendfsync always, no replicas) can skip the quarantine the
// backend otherwise starts after every restart, failover or slot move.
// Every process of the namespace should pass the same options.
func ExampleWithoutRestartQuarantine() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	fsync, err := rdb.ConfigGet(ctx, "appendfsync").Result()
	if err != nil || fsync["appendfsync"] != "always" {
		log.Fatalf("appendfsync %v (%v): a restart may bring back an older state; keep the restart quarantine", fsync, err)
	}
	if _, err := redissimba.New(rdb, "billing", redissimba.WithoutRestartQuarantine()); err != nil {
		log.Fatal(err)
	}
}
