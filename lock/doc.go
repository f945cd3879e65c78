// Package lock provides mutual-exclusion locks on a Simba session: a lock
// is an election that takes exactly one term, with its fencing token.
package lock
