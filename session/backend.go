package session

import "github.com/simba-go/simba/session/driver"

// Backend is a coordination store, built by a backend package (pgsimba,
// mysqlsimba, redissimba, zksimba) or by package memory. An application
// hands it to [Open] and never calls its methods: only the engine does.
// Backend authors implement it; package session/driver documents the
// contract.
type Backend = driver.Backend

// ID names one incarnation of a backend session, as [Session.ID] and
// [Snapshot] report it. A backend never hands out the same ID twice.
type ID = driver.ID

// Owner identifies the process behind a session for people and tools that
// ask who holds a lease: an identity (by default hostname/pid) and a little
// metadata. Set it with [WithIdentity].
type Owner = driver.Owner

// InspectRequest selects the leases [Session.Inspect] reports: the listed
// Names, or every name starting with Prefix when Names is empty.
type InspectRequest = driver.InspectRequest

// Holder is a lease as [Session.Inspect] reports it: its name, token,
// holder's session and owner, and the time that session has left.
type Holder = driver.Holder

// Notice is a hint that a lease may have become free, as
// [Session.WatchNotices] passes it on from the backend.
type Notice = driver.Notice

// Errors shared with the backends: the same values as package driver's,
// so errors.Is matches either name.
var (
	// ErrExpired: the backend session expired (or never existed). A
	// session never comes back: the engine opens a new one. Not to be
	// confused with term.ErrExpired, which a term's EnsureValid returns
	// when this node's own deadline check fails.
	ErrExpired = driver.ErrExpired
	// ErrClosed: the session or the backend value has been closed.
	ErrClosed = driver.ErrClosed
	// ErrQuarantined: the backend lost its records and grants no lease
	// for one maximum lease (event BackendQuarantined says how long).
	// lock.TryAcquire's refusal wraps it.
	ErrQuarantined = driver.ErrQuarantined
	// ErrInitUnsafe: a backend's Init refused to skip the first-use
	// quarantine because records may have been lost recently.
	ErrInitUnsafe = driver.ErrInitUnsafe
	// ErrLockDelay: the backend refused a lock-delay (longer than its
	// WithMaxLockDelay). An attempt's refusal wraps it.
	ErrLockDelay = driver.ErrLockDelay
)
