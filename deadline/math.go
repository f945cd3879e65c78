package deadline

import (
	"math"
	"time"
)

// Validity is how long a grant of remaining (measured by the backend's
// clock) stays valid on the node's clock: remaining × (1 − Drift) − Margin.
// It is negative when the grant is too short to trust at all. c must have
// its defaults applied.
//
// remaining is first clamped to [0, LeaseDuration]: no backend may grant
// more than was asked for, and a reply that claims so (or a negative grant,
// whose product could wrap around) must never lengthen a life. The engine
// refuses such replies before they get here (see [Config.GrantOK]); the
// clamp is the arithmetic's own guard.
func (c Config) Validity(remaining time.Duration) time.Duration {
	remaining = min(max(remaining, 0), c.LeaseDuration)
	return time.Duration(math.Floor(float64(remaining)*(1-c.Drift))) - c.Margin
}

// GrantOK reports whether a backend's grant of remaining is one the
// contract allows: not negative, and not more than the LeaseDuration asked
// for. A reply outside it is a contract violation, to be treated as a
// failed call, never as a longer life.
func (c Config) GrantOK(remaining time.Duration) bool {
	return remaining >= 0 && remaining <= c.LeaseDuration
}

// Deadline is the node's local deadline after a renewal sent at sentAt (a
// reading of the node's monotonic clock, taken before the request left)
// was answered with remaining:
//
//	sentAt + remaining × (1 − Drift) − Margin
//
// Counting from the send, not the receipt, means a slow reply only ever
// shortens the deadline. c must have its defaults applied.
func (c Config) Deadline(sentAt time.Time, remaining time.Duration) time.Time {
	return sentAt.Add(c.Validity(remaining))
}

// Backoff is the wait before retrying a failed renewal when left remains
// until the deadline: half of left, at most RenewInterval, at least
// MinBackoff. The caller must not schedule a retry past the deadline.
// c must have its defaults applied.
func (c Config) Backoff(left time.Duration) time.Duration {
	d := left / 2
	if d > c.RenewInterval {
		d = c.RenewInterval
	}
	if d < c.MinBackoff {
		d = c.MinBackoff
	}
	return d
}

// RenewEvery is the renewal period to use after a backend granted
// remaining. It is RenewInterval while two renewals at RenewInterval fit in
// the grant's local validity; otherwise it is a third of that validity and
// shortened is true. c must have its defaults applied.
func (c Config) RenewEvery(remaining time.Duration) (every time.Duration, shortened bool) {
	v := c.Validity(remaining)
	if 2*c.RenewInterval <= v {
		return c.RenewInterval, false
	}
	every = v / 3
	if every < time.Millisecond {
		every = time.Millisecond
	}
	return every, true
}

// RetryDelay is a candidate's wait between acquisition attempts:
// RenewInterval/2 plus jitter × RetryJitter, where jitter is a random
// number in [0, 1) from the caller's source. c must have its defaults
// applied.
func (c Config) RetryDelay(jitter float64) time.Duration {
	if jitter < 0 || jitter >= 1 || jitter != jitter {
		jitter = 0
	}
	return c.RenewInterval/2 + time.Duration(jitter*float64(c.RetryJitter))
}
