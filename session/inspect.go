package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/simba-go/simba/session/driver"
)

// ErrNoInspector: the session's backend does not implement
// driver.Inspector, so nobody can be asked who holds a lease through it.
var ErrNoInspector = errors.New("simba: the backend cannot inspect leases (it does not implement driver.Inspector)")

// CanInspect reports whether the session's backend can report who holds
// leases (it implements driver.Inspector).
func (s *Session) CanInspect() bool {
	_, ok := s.b.(driver.Inspector)
	return ok
}

// Inspect asks the backend who holds the selected leases, without
// campaigning for them: the live holders, sorted by name (see [Holder]). It fails with an error
// wrapping ErrNoInspector when the backend cannot answer.
func (s *Session) Inspect(ctx context.Context, req InspectRequest) ([]Holder, error) {
	insp, ok := s.b.(driver.Inspector)
	if !ok {
		return nil, fmt.Errorf("simba: inspect: %w", ErrNoInspector)
	}
	return insp.Inspect(ctx, req)
}
