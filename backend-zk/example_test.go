package zksimba_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// A process opens its one Simba session on ZooKeeper. (Needs a server, so
// this example compiles but does not run as a test.)
func ExampleNew() {
	b, err := zksimba.New([]string{"127.0.0.1:2181"}, "/simba/myapp",
		zksimba.WithDigestAuth("myapp", "secret"))
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
	timeout, _ := b.SessionTimeout(s.ID())
	fmt.Println("ZooKeeper session", s.ID(), "negotiated timeout", timeout)
}

func ExampleValidateRoot() {
	fmt.Println(zksimba.ValidateRoot("/simba/myapp"))
	fmt.Println(zksimba.ValidateRoot("/simba/my app"))
	fmt.Println(zksimba.ValidateRoot("/zookeeper/simba"))
	// Output:
	// <nil>
	// zksimba: invalid namespace root: "/simba/my app": path element 2 has byte ' ' at offset 2 (want [A-Za-z0-9._:-])
	// zksimba: invalid namespace root: "/zookeeper/simba": /zookeeper is the server's own subtree
}

// One renewal proves a session alive for 5/12 of its negotiated timeout.
func ExampleGrant() {
	fmt.Println(zksimba.Grant(15 * time.Second))
	fmt.Println(zksimba.Grant(6 * time.Second))
	// Output:
	// 6.25s
	// 2.5s
}

// A first deployment initialises its new namespace once, so that the
// first use is not quarantined; every process then uses the same
// WithMaxLease (here the servers' maxSessionTimeout). (Needs a server, so
// this example compiles but does not run as a test.)
func ExampleBackend_Init() {
	b, err := zksimba.New([]string{"127.0.0.1:2181"}, "/simba/newapp",
		zksimba.WithMaxLease(20*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Safe on every deploy: where records may have been lost (a rebuilt
	// ensemble, records of a lost epoch) it refuses with an error wrapping
	// driver.ErrInitUnsafe, and the first use waits out the quarantine
	// that keeps an old holder and a new one from both believing they lead.
	if err := b.Init(ctx); errors.Is(err, driver.ErrInitUnsafe) {
		log.Print(err) // starting without Init is safe, only slower
	} else if err != nil {
		log.Fatal(err)
	}
}

// The longest lease the backend grants is also its quarantine after the
// namespace lost its records: set it to the servers' maxSessionTimeout.
func ExampleWithMaxLease() {
	_, err := zksimba.New([]string{"127.0.0.1:2181"}, "/simba/myapp", zksimba.WithMaxLease(0))
	fmt.Println(errors.Is(err, zksimba.ErrInvalidOption))
	// Output:
	// true
}

// A lock-delay is allowed up to the backend's maximum (0 by default, which
// refuses every delay); the maximum also lengthens the quarantine after a
// loss to MaxLease + MaxLockDelay. Locks and elections then ask for their
// delay with lock.WithLockDelay and election.WithLockDelay.
func ExampleWithMaxLockDelay() {
	b, err := zksimba.New([]string{"127.0.0.1:2181"}, "/simba/myapp", zksimba.WithMaxLockDelay(15*time.Second))
	fmt.Println(b != nil, err)
	_, err = zksimba.New([]string{"127.0.0.1:2181"}, "/simba/myapp", zksimba.WithMaxLockDelay(-time.Second))
	fmt.Println(errors.Is(err, zksimba.ErrInvalidOption))
	// Output:
	// true <nil>
	// true
}
