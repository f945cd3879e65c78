package zksimba_test

import (
	"context"
	"fmt"
	"log"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session"
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
