// Package gocronsimba runs gocron v2 jobs (github.com/go-co-op/gocron/v2)
// on one scheduler of a fleet at a time, under Simba's elections and
// locks.
//
// gocron's distributed mode asks an Elector before each run, or takes a
// Locker's lock for each run. This package provides both:
//
//   - [Elector] lets a job run only where an [election.Election] is
//     leader: one leader runs every job, and leadership moves in Simba's
//     handover order.
//   - [Locker] takes one Simba lock per run, named after the job: any
//     scheduler may run a job, never two at once.
//
// gocron hands a task its job's own context, which the adapters cannot
// replace. To reach the term's fencing token from the job, and to have the
// job's context end when the term ends, wrap the task with the adapter's
// Task method: the wrapped task gets a context cancelled at the end of the
// term (its cause is the term's [term.RevokeReason]) and the
// [term.Term] whose token the job passes to the resources it writes. A task
// that is not wrapped still runs only where the adapter allowed it, but it
// learns nothing of the term and is not cancelled when the term ends.
package gocronsimba
