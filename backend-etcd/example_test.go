package etcdsimba_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A process opens its Simba session on etcd through its own client (TLS,
// credentials and endpoints are the client's). Switching from Redis is
// this constructor only. (Needs a server, so this example compiles but does
// not run as a test.)
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
		// Find a stalled member's connection dead (docs/deployment/etcd.md).
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	b, err := etcdsimba.New(cli, "/simba/myapp")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := session.Open(ctx, b)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Println("etcd session", s.ID())
}

func ExampleValidateNamespace() {
	fmt.Println(etcdsimba.ValidateNamespace("/simba/myapp"))
	fmt.Println(errors.Is(etcdsimba.ValidateNamespace("simba/myapp"), etcdsimba.ErrInvalidNamespace))
	// Output:
	// <nil>
	// true
}

// A lock-delay is allowed up to the backend's maximum (0 by default, which
// refuses every delay); the maximum also lengthens the quarantine after a
// loss to MaxLease + MaxLockDelay. Locks and elections then ask for their
// delay with lock.WithLockDelay and election.WithLockDelay.
func ExampleWithMaxLockDelay() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	b, err := etcdsimba.New(cli, "/simba/myapp", etcdsimba.WithMaxLockDelay(15*time.Second))
	fmt.Println(b != nil, err)
	_, err = etcdsimba.New(cli, "/simba/myapp", etcdsimba.WithMaxLockDelay(-time.Second))
	fmt.Println(errors.Is(err, etcdsimba.ErrInvalidOption))
	// Output:
	// true <nil>
	// true
}

// On every etcd but 3.4.31-3.4.33 and 3.5.13-3.5.15 a stalled leader that resumes may
// revoke leases the new leader renewed a moment before
// (etcd-io/etcd#15247): the revoke guard keeps a name whose term ended
// without a release refused for its session's lease, so its holder's
// belief runs out before anyone else is granted it. A release or Close
// hands over at once. It is on by default until every member is proven to
// run a fixed version; WithRevokeGuard keeps it on for good.
func ExampleWithRevokeGuard() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	b, err := etcdsimba.New(cli, "/simba/myapp", etcdsimba.WithMaxLease(10*time.Second), etcdsimba.WithRevokeGuard())
	fmt.Println(b != nil, err)
	// Output:
	// true <nil>
}
