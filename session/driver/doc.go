// Package driver is the contract between Simba's session engine and a
// coordination store, as database/sql/driver is for database/sql: backend
// authors implement it, applications never call it.
//
// A backend implements [Backend] (required). Optional capabilities are
// found by a type assertion on the Backend, each with a fallback when
// missing:
//
//   - [Broadcaster]: push release notices, so candidates attempt at once;
//     without it they poll every candidate tick.
//   - [Inspector]: report who holds leases without campaigning; without it
//     observation and group membership are unavailable on that backend.
//
// Package session/backendtest is the conformance kit every backend runs;
// package session/memory is the in-memory reference implementation.
//
// Applications see a few of these types through package session under the
// same identity: session.Backend, session.ID and session.Owner are aliases
// of the types here, and session.ErrExpired and session.ErrClosed are the
// same values as [ErrExpired] and [ErrClosed].
package driver
