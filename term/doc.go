// Package term holds [Term], one period in which a node owns a lease, and
// the reasons a term ends.
//
// A Term carries the lease name and its fencing token, which is greater
// than zero, fixed for the term and strictly increasing across the terms of
// one name: resources that remember the highest token they accepted can
// refuse a late write from an old term. [Term.Valid] and [Term.Remaining]
// are pure functions of the node's monotonic clock and the session's local
// deadline, so a process waking from a long pause reads false on its first
// read, without any watchdog having run. A term ends exactly once, for one
// [RevokeReason], and never becomes valid again.
package term
