package term

import "fmt"

// RevokeReason says why a term ended. It is an error so that it can be a
// context cause: context.Cause(t.Context()) == term.Stopped, and
// errors.Is(err, term.TakenOver) work directly.
type RevokeReason int

// The reasons a term ends.
const (
	// Stopped: the election was stopped, the lock released, or the session
	// closed.
	Stopped RevokeReason = iota + 1
	// SteppedDown: the election stepped down.
	SteppedDown
	// DeadlinePassed: the session's local deadline passed without a
	// successful renewal.
	DeadlinePassed
	// SessionExpired: the backend reported the session expired.
	SessionExpired
	// TakenOver: a renewal reply no longer listed the lease as owned by this
	// session.
	TakenOver
)

var reasonNames = [...]string{"", "STOPPED", "STEPPED_DOWN", "DEADLINE_PASSED", "SESSION_EXPIRED", "TAKEN_OVER"}

// String returns the reason's name as the specification spells it, such as
// "DEADLINE_PASSED".
func (r RevokeReason) String() string {
	if r > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("RevokeReason(%d)", int(r))
}

// Error returns "term revoked: " and the reason's name.
func (r RevokeReason) Error() string { return "simba: term revoked: " + r.String() }

// Voluntary reports whether the node itself chose to end the term (Stopped
// or SteppedDown). Only a voluntary end waits for the term's tasks before
// releasing the lease.
func (r RevokeReason) Voluntary() bool { return r == Stopped || r == SteppedDown }

// MarshalText encodes the reason as its name.
func (r RevokeReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText decodes a reason's name.
func (r *RevokeReason) UnmarshalText(b []byte) error {
	for i, n := range reasonNames {
		if i > 0 && n == string(b) {
			*r = RevokeReason(i)
			return nil
		}
	}
	return fmt.Errorf("simba: unknown revoke reason %q", b)
}
