package redissimba

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/session/driver"
)

// Shutdown stops the backend's pub/sub subscription, if any: every
// Subscribe's fn stops being called and later Subscribe calls fail with an
// error wrapping driver.ErrClosed. Sessions are not closed (close them
// first; the engine does on its Close), and the Redis client stays the
// caller's: Shutdown never closes it. It waits for the delivery loop to
// return, or for ctx. Every backend package has this shape, so an
// application shuts any backend down the same way (ADR 0061).
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.shut = true
	s := b.sub
	b.sub = nil
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	_ = s.ps.Close() // closing a subscription only fails if already closed
	if goid() == s.loop {
		return nil // called from a notice callback: waiting would be waiting for itself
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redissimba: shutdown: %w", context.Cause(ctx))
	}
}

// errShut is what Subscribe answers after Shutdown.
var errShut = fmt.Errorf("redissimba: subscribe after Shutdown: %w", driver.ErrClosed)
