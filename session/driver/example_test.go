package driver_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// counting decorates a Backend, as a metrics or fault-injection wrapper
// would. It embeds the Backend it wraps, so the methods it does not
// override pass through; optional capabilities (Broadcaster, Inspector)
// are not promoted through the interface and would need forwarding.
type counting struct {
	driver.Backend
	opens, closes atomic.Int64
}

func (c *counting) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	c.opens.Add(1)
	return c.Backend.Open(ctx, req)
}

func (c *counting) Close(ctx context.Context, id driver.ID) error {
	c.closes.Add(1)
	return c.Backend.Close(ctx, id)
}

// A backend implements Backend; the engine is its only caller.
func Example() {
	mem, err := memory.New()
	if err != nil {
		panic(err)
	}
	b := &counting{Backend: mem}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	_ = s.Close()
	fmt.Printf("opens: %d, closes: %d\n", b.opens.Load(), b.closes.Load())
	// Output: opens: 1, closes: 1
}
