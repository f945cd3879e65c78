package session

import "fmt"

// State is the state of a Session, as [Session.Snapshot] reports it.
type State int

// The states of a Session.
const (
	// Opening: no backend session yet, or opening a new one after the last
	// one expired or passed its deadline.
	Opening State = iota + 1
	// Live: the last renewal succeeded.
	Live
	// Suspended: the last renewal failed but the local deadline has not
	// passed; renewal is retried with halving backoff.
	Suspended
	// Closed: Close was called.
	Closed
)

var stateNames = [...]string{"", "OPENING", "LIVE", "SUSPENDED", "CLOSED"}

// String returns the state's name, such as "LIVE".
func (s State) String() string {
	if s > 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText encodes the state as its name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a state's name, so that a [Snapshot] written as
// JSON reads back.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if i > 0 && n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("simba: unknown session state %q", b)
}
