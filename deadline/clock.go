package deadline

import "time"

// A Clock reads the node's monotonic clock. The [time.Time] values it
// returns are only ever compared with each other (Sub, Before), never with a
// backend's time.
type Clock interface {
	Now() time.Time
}

// System is the [Clock] of the running process: [time.Now].
type System struct{}

// Now returns time.Now(), which carries Go's monotonic reading.
func (System) Now() time.Time { return time.Now() }
