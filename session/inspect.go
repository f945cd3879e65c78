package session

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoInspector: the session's backend does not implement [Inspector], so
// nobody can be asked who holds a lease through it.
var ErrNoInspector = errors.New("simba: the backend cannot inspect leases (it does not implement session.Inspector)")

// CanInspect reports whether the session's backend implements [Inspector].
func (s *Session) CanInspect() bool {
	_, ok := s.b.(Inspector)
	return ok
}

// Inspect asks the backend who holds the selected leases (see
// [Inspector]), without campaigning for them. It fails with an error
// wrapping ErrNoInspector when the backend cannot answer.
func (s *Session) Inspect(ctx context.Context, req InspectRequest) ([]Holder, error) {
	insp, ok := s.b.(Inspector)
	if !ok {
		return nil, fmt.Errorf("simba: inspect: %w", ErrNoInspector)
	}
	return insp.Inspect(ctx, req)
}

// InspectLater is Inspect for modules built on the session (a group polls
// its members with it): it must be called with the engine's lock held, and
// reply runs later with the lock held, like a [ClaimHandler] method. The
// call goes through the session's Env (virtual time in the simulation) and
// times out after one renewal period (reply then gets
// context.DeadlineExceeded); Close waits for it. After Close, reply runs
// at once with ErrClosed.
func (s *Session) InspectLater(req InspectRequest, reply func([]Holder, error)) {
	insp, ok := s.b.(Inspector)
	switch {
	case !ok:
		reply(nil, fmt.Errorf("simba: inspect: %w", ErrNoInspector))
		return
	case s.state == Closed:
		reply(nil, fmt.Errorf("simba: inspect: %w", ErrClosed))
		return
	}
	var hs []Holder
	var err error
	s.call(func(ctx context.Context) {
		hs, err = insp.Inspect(ctx, req)
	}, func(timedOut bool) {
		if timedOut {
			// op may still be running and writing hs and err: leave them.
			reply(nil, context.DeadlineExceeded)
			return
		}
		reply(hs, err)
	}, nil)
}
