package deadline_test

import (
	"fmt"
	"time"

	"github.com/simba-go/simba/deadline"
)

func ExampleConfig_Validate() {
	c := deadline.Config{LeaseDuration: 15 * time.Second, RenewInterval: 8 * time.Second}
	fmt.Println(c.Validate())
	// Output: simba: invalid config: RenewInterval × 2 ≤ LeaseDuration does not hold: 2 × 8s > 15s
}

func ExampleConfig_Deadline() {
	c := deadline.Config{}.WithDefaults()
	sentAt := time.Now()
	d := c.Deadline(sentAt, 15*time.Second)
	fmt.Println(d.Sub(sentAt))
	// Output: 14.8s
}

func ExampleConfig_RenewEvery() {
	c := deadline.Config{}.WithDefaults()
	// A ZooKeeper session of 15s proves liveness for 5/12 of it.
	every, shortened := c.RenewEvery(15 * time.Second * 5 / 12)
	fmt.Println(every.Round(time.Millisecond), shortened)
	// Output: 2.046s true
}

func ExampleValidateName() {
	fmt.Println(deadline.ValidateName("orders:eu-1"))
	fmt.Println(deadline.ValidateName("a/b"))
	// Output:
	// <nil>
	// simba: invalid lease name: "a/b" has byte '/' at offset 1 (want [A-Za-z0-9._:-])
}
