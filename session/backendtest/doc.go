// Package backendtest is the conformance kit for [driver.Backend]
// implementations: one [Run] checks, against a real store, every promise the
// Backend documentation and the specification make, so that backend-sql,
// backend-redis, backend-zk and the in-memory backend are held to the same
// rules.
//
// It reads like [testing/slogtest.Run] and [testing/fstest.TestFS]: a
// backend's test passes a factory and a lease duration,
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Config{
//			NewBackend: func(t *testing.T, namespace string) driver.Backend {
//				return mybackend.New(client, namespace) // closed by t.Cleanup
//			},
//			Lease: 2 * time.Second,
//		})
//	}
//
// and Run runs one named subtest per promise, each in a fresh namespace
// ("kt" and 8 random hex digits, valid on every backend). Every failure
// message ends with the promise it checks; docs/spec-coverage/backendtest.md
// lists the subtests and their promises. Subtest names are stable: the
// backends' coverage tables cite them.
//
// Like testing/slogtest, this package imports testing: it is meant to be
// imported only from _test files.
//
// Subtests that must let the backend's time pass (expiry, renewal) wait on
// real timers sized from [Config.Lease] and run in parallel with each other,
// unless [Config.Advance] moves virtual time, in which case everything runs
// sequentially and at once. With a 2s lease the kit takes about ten seconds
// on a real server.
//
// Optional parts: a backend that implements [driver.Broadcaster] is also
// checked for release notices; a Config with LoseData is also checked for
// tokens that keep rising after the store lost its data and, with
// [Config.MaxLease], for the quarantine of one maximum lease that follows
// the loss (ADR 0130); a Config with [Config.Init] is also checked for the
// quarantine of a namespace nobody initialised; a Config with
// [Config.MaxLockDelay] is also checked for the lock-delay (ADR 0240): a
// name refused for the delay after its holder's session expired, free at
// once after a Release or a Close, delays out of range refused, and a
// quarantine of the maximum lease plus the maximum lock-delay.
package backendtest
