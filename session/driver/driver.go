package driver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/tokenjson"
)

// ID names one incarnation of a backend session: a random 128-bit value in
// hex on SQL and Redis, the ZooKeeper session id on ZooKeeper. A backend
// never hands out the same ID twice.
type ID string

// Lease is a lease a session owns: the name and the fencing token of the
// term that acquired it. In JSON the token is a string (ADR 0196).
type Lease struct {
	Name  string `json:"name"`
	Token uint64 `json:"token,string"`
}

// UnmarshalJSON reads the token as a string or, as v0.1.0 wrote it, a
// number.
func (l *Lease) UnmarshalJSON(b []byte) error {
	type plain Lease
	w := struct {
		*plain
		Token tokenjson.Token `json:"token"`
	}{plain: (*plain)(l), Token: tokenjson.Token(l.Token)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	l.Token = uint64(w.Token)
	return nil
}

// Errors a [Backend] returns. Backends wrap them with detail; the engine
// tests them with errors.Is. Package session exports the same values
// (session.ErrExpired is ErrExpired), so errors.Is matches either name.
var (
	// ErrExpired: the session has expired on the backend (or never
	// existed). It answers so forever after: a session never comes back.
	ErrExpired = errors.New("simba: session expired")
	// ErrClosed: the session or the backend value has been closed.
	ErrClosed = errors.New("simba: session closed")
	// ErrQuarantined: the backend lost its namespace's records and grants
	// no lease until every term granted before the loss has ended on its
	// holder's clock and every lock-delay under way has passed (one maximum
	// lease plus one maximum lock-delay, [AcquireReply.Quarantine]). The
	// engine reports a refused name with an error wrapping it.
	ErrQuarantined = errors.New("simba: backend quarantined after losing its records")
	// ErrInitUnsafe: a backend's Init refused to create a namespace's epoch
	// without a quarantine because the server shows a sign that records
	// may have been lost within one maximum lease (a recent restart, a
	// changed replication history, records of another epoch). Skipping the
	// quarantine then could let a holder from before the loss overlap a new
	// one. A backend that honours lock-delays (WithMaxLockDelay) looks
	// back one maximum lease plus one maximum lock-delay: a delay lost
	// with the records may run that long after the loss, and an Init
	// that skips the quarantine would end it at once. The backend's
	// ForceInit is for the operator who knows better.
	ErrInitUnsafe = errors.New("simba: init refused: records may have been lost within one maximum lease")
	// ErrLockDelay: an Acquire asked for a lock-delay the backend does not
	// honour: negative, or longer than the maximum it was built with
	// (WithMaxLockDelay, the same option on every backend; 0 by default,
	// which refuses every positive delay). The error names the maximum.
	ErrLockDelay = errors.New("simba: lock-delay refused by the backend")
)

// OpenRequest asks a backend for a new session.
type OpenRequest struct {
	// LeaseDuration is the time the backend should keep the session alive
	// after each renewal. The backend may grant less.
	LeaseDuration time.Duration
	// Owner says who opened the session. The engine always fills it in,
	// validated by deadline.ValidateOwner; a backend stores it with the
	// session and reports it through [Inspector].
	Owner Owner
}

// Owner identifies the process behind a session for people and tools that
// ask who holds a lease: an identity (by default hostname/pid) and a little
// metadata, such as the address of the owner's status page. Its size is
// bounded (deadline.ValidateOwner) so every backend can store it.
type Owner struct {
	Identity string            `json:"identity"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Check reports whether a backend may store o: the zero Owner (a direct
// caller that says nothing) or one that deadline.ValidateOwner accepts,
// whose error it returns. Backends check again what the engine checked,
// since they may be called directly.
func (o Owner) Check() error {
	if o.Identity == "" && len(o.Metadata) == 0 {
		return nil
	}
	return deadline.ValidateOwner(o.Identity, o.Metadata)
}

// Holder is a lease as an inspection sees it. In JSON the token is a
// string (ADR 0196).
type Holder struct {
	Name    string `json:"name"`
	Token   uint64 `json:"token,string"`
	Session ID     `json:"session"`
	Owner   Owner  `json:"owner"`
	// Remaining is the time the holder's session has left, measured by the
	// backend's clock when it answered. It is informative only: nothing may
	// act on another session's lease because of it.
	Remaining time.Duration `json:"remaining"`
}

// UnmarshalJSON reads the token as a string or, as v0.1.0 wrote it, a
// number.
func (h *Holder) UnmarshalJSON(b []byte) error {
	type plain Holder
	w := struct {
		*plain
		Token tokenjson.Token `json:"token"`
	}{plain: (*plain)(h), Token: tokenjson.Token(h.Token)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	h.Token = uint64(w.Token)
	return nil
}

// InspectRequest selects the leases an inspection reports: the listed
// Names, or every name starting with Prefix when Names is empty (every
// lease of the namespace when Prefix is empty too). Names and a non-empty
// Prefix are validated with deadline.ValidateName.
type InspectRequest struct {
	Names  []string
	Prefix string
}

// Inspector is implemented by backends that can report who holds leases
// without campaigning for them: observation (who leads?), operators' tools
// and partition-group membership build on it. Like database/sql/driver's
// optional interfaces, the engine finds it by a type assertion on the
// Backend.
type Inspector interface {
	// Inspect lists the live holders of the selected leases, sorted by
	// name. A name nobody holds (or whose holder's session has expired on
	// the backend) is left out.
	Inspect(ctx context.Context, req InspectRequest) ([]Holder, error)
}

// OpenReply is a new session.
type OpenReply struct {
	ID ID
	// Remaining is the time the session has left, measured by the backend's
	// clock when it answered.
	Remaining time.Duration
	// Nominal, when positive, is the grant the backend's own rule gives for
	// the LeaseDuration asked for, for a backend whose rule grants less than
	// the lease by design (ZooKeeper: 5/12 of the session timeout, because
	// that is all one renewal proves). The engine still renews as often as
	// every grant needs, but publishes SessionLeaseShortened (a warning) only
	// for a grant shorter than Nominal (a server that clamped the lease),
	// not for every session of such a backend. Zero means the rule is the
	// lease itself. It only decides the warning: it never lengthens a term,
	// and a value outside (0, LeaseDuration] is ignored.
	Nominal time.Duration
}

// RenewRequest proves a session alive.
type RenewRequest struct {
	ID ID
	// KnownVersion is the Version of the owned-lease set the engine last
	// saw in full, or 0 to ask for the full list.
	KnownVersion uint64
}

// RenewReply answers a renewal.
type RenewReply struct {
	// Remaining is the time the session has left after this renewal,
	// measured by the backend's clock.
	Remaining time.Duration
	// Version identifies the session's set of owned leases. A backend
	// changes it (to a value it never used before for this session)
	// whenever that set changes: an acquisition, a release, a takeover, or
	// a loss it detects. It is never 0.
	Version uint64
	// Full reports that Leases lists every lease the session owns. A
	// backend must set it when Version differs from the request's
	// KnownVersion, and may always set it.
	Full bool
	// Leases is the owned set when Full is true.
	Leases []Lease
}

// AcquireRequest tries to acquire one or more leases for a session. One
// request carries every name the engine wants at a tick, so a node with
// many elections makes one call, not one per election.
type AcquireRequest struct {
	ID    ID
	Names []string
	// LockDelay, when positive, is the lock-delay of every name of the
	// request (Chubby's, Consul's): a term granted by this request that
	// ends without a release (its session expired or closed without
	// releasing it, its holder's deadline passed, a takeover) leaves its
	// name ungrantable to any session for LockDelay after the backend
	// finds the session ended, measured by the backend's clock (the
	// server's, never a candidate's), so that a paused old holder that
	// wakes and writes finds nobody else at work. A Release of the lease
	// skips it; so does a Close of the session that owns it (an
	// application's Session.Close ends the session on purpose; the engine
	// never closes a backend session that asked for a delay once its
	// local deadline has passed, but lets it expire, ADR 0275).
	// While a name waits out its delay, Acquire answers it as held
	// (Token 0). The delay is the one of the request that won the term.
	// A backend that cannot honour LockDelay (above its
	// WithMaxLockDelay) answers the whole request with an error wrapping
	// ErrLockDelay; zero is today's behaviour on every backend.
	//
	// Data loss loses the delays with the leases, so a backend's
	// quarantine after a loss lasts its maximum lease plus its maximum
	// lock-delay: a holder paused across the loss is covered too.
	LockDelay time.Duration
}

// AcquireResult is the outcome for one name of an [AcquireRequest].
type AcquireResult struct {
	Name string
	// Token is the new term's fencing token, or 0 when not acquired. If the
	// session already owned the name, the backend answers with the token it
	// owns it under.
	Token uint64
	// Err, if not nil, is why the name could not be tried at all (an invalid
	// name). A name held by another live session is not an error: Token is 0.
	Err error
}

// AcquireReply answers an [AcquireRequest], one result per name in order.
type AcquireReply struct {
	Results []AcquireResult
	// Quarantine, when positive, says the backend found its namespace's
	// records lost (a flush, an eviction, a restart without persistence, a
	// failover to a replica that missed writes, a deleted root or emptied
	// table) and grants no lease for this much longer, measured by its
	// clock when it answered: until every session that could still believe
	// in a term granted before the loss has passed its deadline. Every
	// result's Token is then 0. See ErrQuarantined.
	Quarantine time.Duration
	// QuarantineHint, optional, says in words what the backend saw and
	// what an operator can do (e.g. "the namespace has no epoch record:
	// new, or lost; for a new namespace run Init"); the engine adds it to
	// the quarantine's error.
	QuarantineHint string
}

// ReleaseRequest releases leases a session owns. A lease is deleted only
// when it is owned by that session under that token; otherwise releasing
// it is a no-op, so a late release never touches a later term.
type ReleaseRequest struct {
	ID     ID
	Leases []Lease
}

// Backend is what a coordination store must provide to run Simba sessions:
// the service provider interface that backend-sql, backend-redis and
// backend-zk implement. docs/adr/0002-backend-spi.md explains its shape.
// Only the session engine calls these methods: an application hands a
// Backend to session.Open and never calls it itself.
//
// A Backend value may serve many sessions at once unless its documentation
// says otherwise. Every method must honour ctx: the engine gives each call
// a timeout of one renewal period.
//
// The promises every implementation keeps, checked by the conformance kit
// in package session/backendtest:
//
//   - Sessions live on the backend's clock: opened with the requested lease
//     duration (or less), expired by the backend after that long without a
//     renewal. Remaining is a duration measured by the backend's clock.
//   - An expired session answers [ErrExpired] to Renew and Acquire forever;
//     its ID is never handed out again.
//   - Renew is one call whatever the number of leases, and reports exactly
//     the leases the session owns.
//   - Acquire succeeds for a name only if it is free or its owner's session
//     has expired on the backend. Each new term's token is strictly higher
//     than every token ever handed out for that name, also after releases,
//     deletions and loss of the backend's data (or the backend refuses with
//     an error saying so).
//   - After losing its records, a backend grants no lease until one
//     maximum lease (the longest it grants, measured by its clock) has
//     passed since it noticed the loss, and says so in
//     [AcquireReply.Quarantine]: a session that believed in a term granted
//     before the loss has passed its deadline by then. Sessions whose
//     records vanished answer [ErrExpired]. A namespace that was never
//     used cannot be told from a lost one, so a backend quarantines a new
//     namespace too unless an explicit initialisation step created it.
//   - Release carries the token and is a no-op when it does not match.
//   - Names are validated with deadline.ValidateName; invalid names are
//     rejected with an error wrapping deadline.ErrInvalidName.
//
// A backend that can broadcast releases also implements [Broadcaster].
type Backend interface {
	// Open opens a new session.
	Open(ctx context.Context, req OpenRequest) (OpenReply, error)
	// Renew proves the session alive and reports the leases it owns. It
	// returns an error wrapping ErrExpired if the session has expired.
	Renew(ctx context.Context, req RenewRequest) (RenewReply, error)
	// Acquire tries to acquire each name for the session. It returns an
	// error wrapping ErrExpired (and acquires nothing) if the session has
	// expired.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireReply, error)
	// Release deletes the leases that the session owns under the given
	// tokens, and tells other clients through the broadcast, if any.
	Release(ctx context.Context, req ReleaseRequest) error
	// Close ends the session at once and releases every lease it owns.
	// Closing an expired or unknown session is not an error.
	Close(ctx context.Context, id ID) error
}

// Notice tells a client that a lease may have become free. It is a hint:
// the engine answers it with an acquisition attempt, and a lost notice only
// delays a takeover until the next periodic attempt.
type Notice struct {
	// Name is the lease that was released or whose owner's session ended.
	// Empty means notices may have been lost (the subscription was
	// re-established): every waiting candidate should attempt.
	Name string
}

// Broadcaster is implemented by backends that push release notices (Redis
// pub/sub, ZooKeeper watches, PostgreSQL LISTEN/NOTIFY). Without it,
// candidates only poll.
type Broadcaster interface {
	// Subscribe starts delivering notices to fn, which must not block, until
	// the returned stop function is called. stop waits until fn will not be
	// called again. The subscription covers at least every name that a
	// failed Acquire of the same Backend value asked for and the backend
	// answered as held by another session (a call that failed before it
	// reached the backend may be answered only by the next attempt);
	// backends that broadcast to the whole namespace deliver more, and the
	// engine ignores names it does not want.
	Subscribe(fn func(Notice)) (stop func(), err error)
}
