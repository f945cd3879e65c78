// Package session is Simba's per-process session engine.
//
// A [Session] opens one session on a [Backend] and keeps it alive with one
// renewal every renewal period, whatever the number of leases it holds.
// Every renewal reply carries the time the session has left, measured by
// the backend's clock; the engine turns it into a local deadline on the
// node's monotonic clock (see package deadline), and every [term.Term] of
// the session is valid only until then. The states:
//
//	OPENING   no backend session yet, or opening a new one after the last ended
//	LIVE      the last renewal succeeded
//	SUSPENDED the last renewal failed; retried with halving backoff until the deadline
//	CLOSED    Close was called
//
// What ends a term: the local deadline passing without a successful
// renewal (DEADLINE_PASSED; a late reply never extends it), the backend
// answering that the session expired (SESSION_EXPIRED; a new backend
// session with a new id is opened, never the old one revived), a renewal
// reply that no longer lists the lease (TAKEN_OVER), and Close (STOPPED).
// When the backend grants less time than two renewal periods need, the
// session renews every third of the granted validity and publishes
// SessionLeaseShortened once per backend session, unless the grant is the
// backend's own rule (driver.OpenReply.Nominal: ZooKeeper's 5/12).
//
// Elections, locks and groups (other modules) register lease names on a
// session; the session batches the acquisition attempts of all of them
// into one backend call per candidate tick. The hooks they use are not
// part of this package's API: they live under Simba's internal/ tree,
// which only Simba's own modules can import
// (docs/adr/0060-audiences.md).
//
// The engine does no I/O of its own beyond calling the Backend, and takes
// its clock, timers and goroutines from an [Env], so every rule can be
// tested on virtual time. Events ([Event], [Listener]) report what
// happens, for logs (through log/slog by default) and telemetry.
//
// # Backends
//
// An application builds a [Backend] with a backend package (pgsimba,
// mysqlsimba for SQL; the Redis and ZooKeeper packages) and hands it to
// [Open]. Backend authors implement the contract of subpackage driver;
// subpackage memory is an in-memory backend for tests and demos;
// subpackage backendtest is the conformance kit every backend runs.
package session
