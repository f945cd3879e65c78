// Package election runs leader elections on a Simba session: candidates,
// terms with fencing tokens, the four-state lifecycle, serial callbacks, the
// handover order, RunWhileLeader and leader-only scheduled jobs.
package election
