// Package deadline holds Simba's time math: the session timing [Config]
// with its defaults and validation, the local-deadline formula, the backoff
// after a failed renewal, the renewal period when a backend grants less time
// than asked, the candidate retry delay, and lease-name validation.
//
// Everything here is a pure function of its inputs; it depends on the
// standard library only, so every other Simba module can share it.
//
// The one rule behind it all: a node never compares its clock with the
// backend's. A backend answers a renewal with the time the session has left,
// measured by the backend's clock, and [Config.Deadline] turns that
// duration into a deadline on the node's monotonic clock that falls before
// the backend's expiry whenever the two clocks' rates differ by at most
// Drift:
//
//	deadline = sentAt + remaining × (1 − drift) − margin
package deadline
