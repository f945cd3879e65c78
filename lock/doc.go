// Package lock provides mutual-exclusion locks on a Simba session. A lock
// takes exactly one term of its name (like a single-term election, without
// callbacks or tasks): [Acquire] blocks until the lock is held (or ctx
// ends), [TryAcquire] makes one attempt. The returned
// [Held] carries the term's fencing token; pass it to the resources you
// write so they can refuse a late write from a holder that lost the lock.
//
// When the term ends for any reason (Close, the session's deadline, expiry,
// takeover) the lock is released for good: acquire it again for a new term.
package lock
