package session

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/simba-go/simba/term"
)

// EventKind says what happened.
type EventKind int

// The kinds of [Event].
const (
	// SessionOpened: a new backend session is open (ID, Remaining, RenewEvery).
	SessionOpened EventKind = iota + 1
	// SessionRenewed: a renewal succeeded (Remaining, RenewEvery). Published
	// for every renewal; listeners that only care about changes watch State.
	SessionRenewed
	// SessionSuspended: a renewal failed (Err); retries follow until the
	// deadline. Also published, with State OPENING, when an attempt to open
	// a backend session failed; the next attempt follows after a backoff.
	SessionSuspended
	// SessionDeadlinePassed: the local deadline passed without a successful
	// renewal; the session's terms ended with DEADLINE_PASSED.
	SessionDeadlinePassed
	// SessionExpired: the backend answered that the session expired.
	SessionExpired
	// SessionClosed: Close ended the session.
	SessionClosed
	// SessionLeaseShortened: the backend grants less time than two renewal
	// periods need; the session now renews every RenewEvery. Published once
	// per backend session, and not at all when the grant is what the
	// backend's own rule gives (driver.OpenReply.Nominal, ZooKeeper's 5/12).
	SessionLeaseShortened
	// TermElected: a term began (Name, Token).
	TermElected
	// TermRevoked: a term ended (Name, Token, Reason).
	TermRevoked
	// BackendContractViolation: a backend reply broke the SPI's contract (a
	// grant outside [0, the lease asked for]; an acquisition reply with a
	// missing, duplicated or unasked-for name). Err wraps
	// ErrContractViolation and says what; the reply was treated as a failed
	// call, never as a longer life or a win.
	BackendContractViolation
	// BackendQuarantined: the backend found its records lost and grants no
	// lease for Remaining more (measured by its clock): the price of data
	// loss, one maximum lease of unavailability, so that no term granted
	// before the loss overlaps a new one. Published once per quarantine the
	// session sees; Err wraps ErrQuarantined.
	BackendQuarantined
	// TermDeadlineNear: the term's local deadline is within the margin of
	// WithDeadlineWarning (Name, Token, Remaining: the time left, Deadline):
	// renewals have not come in time, and the term ends with
	// DEADLINE_PASSED at Deadline unless one does. Published once per term
	// and deadline to listeners; the session's logger gets one WARN line
	// per deadline counting the terms (terms=N, the first one's name), not
	// one per term.
	TermDeadlineNear
	// LockDelayRefused: the backend refused the lock-delay a claim asks
	// for (election.WithLockDelay, lock.WithLockDelay) because it is above
	// the backend's WithMaxLockDelay (Name, ClaimKind, Remaining: the delay
	// asked for; Err wraps ErrLockDelay and names the maximum). The claim
	// stops competing: an election stops (Status STOPPED), a lock's Acquire
	// or TryAcquire returns Err. A configuration error, logged at ERROR.
	LockDelayRefused
)

var kindNames = [...]string{"", "SessionOpened", "SessionRenewed", "SessionSuspended", "SessionDeadlinePassed",
	"SessionExpired", "SessionClosed", "SessionLeaseShortened", "TermElected", "TermRevoked", "BackendContractViolation", "BackendQuarantined", "TermDeadlineNear",
	"LockDelayRefused"}

// String returns the kind's name, such as "SessionLeaseShortened".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "EventKind(?)"
}

// Event is something that happened to a session or one of its terms. It is
// a struct so that fields can be added later; fields that do not apply to
// a kind are zero.
type Event struct {
	Kind EventKind
	// Time is when the engine saw it, on the node's clock.
	Time time.Time
	// Session is the backend session it concerns.
	Session ID
	// State is the session's state after the event.
	State State
	// Remaining is the time granted by the backend (SessionOpened,
	// SessionRenewed, SessionLeaseShortened), or the lock-delay asked for
	// (LockDelayRefused).
	Remaining time.Duration
	// RenewEvery is the renewal period in force after the event.
	RenewEvery time.Duration
	// Name and Token identify the term (TermElected, TermRevoked). The
	// token is a string in JSON, as everywhere (ADR 0196).
	Name  string
	Token uint64 `json:",string"`
	// ClaimKind is what the term belongs to, as its claim's [Describer]
	// names it ("election", "lock", ...; TermElected, TermRevoked), empty
	// if the claim does not describe itself.
	ClaimKind string
	// Reason is why the term ended (TermRevoked).
	Reason term.RevokeReason
	// Deadline is the local deadline of the term's session when the term
	// ended (TermRevoked): a term was never valid past it, so a term that
	// ended because its deadline passed (noticed at Time, perhaps late,
	// after a pause of the process) was over at Deadline already.
	Deadline time.Time
	// Err is the failure behind SessionSuspended or BackendContractViolation.
	Err error
}

// A Listener receives events. It is called with no lock held but in the
// order events happen, on the session's delivery loop: it must return
// quickly, since nothing else is delivered meanwhile. A blocking call made
// from it (Session.Close, an election's Stop) starts its work and returns
// ErrWouldBlockSelf instead of waiting for the loop it holds up.
type Listener func(Event)

// LogEvents returns a Listener that logs events through l: errors for
// backend contract violations; warnings for suspension, deadline passed,
// expiry and shortened leases; info for session changes and for the terms
// of elections; debug for renewals and for the terms of locks (one per
// acquisition: a lock-heavy service would otherwise log two lines per
// lock).
func LogEvents(l *slog.Logger) Listener {
	return func(e Event) {
		if l.Enabled(context.Background(), eventLevel(e)) {
			logEvent(l, e)
		}
	}
}

// eventLevel is the level LogEvents logs e at.
func eventLevel(e Event) slog.Level {
	switch e.Kind {
	case SessionRenewed:
		return slog.LevelDebug
	case SessionSuspended, SessionDeadlinePassed, SessionExpired, SessionLeaseShortened, BackendQuarantined, TermDeadlineNear:
		return slog.LevelWarn
	case BackendContractViolation, LockDelayRefused:
		return slog.LevelError
	case TermElected, TermRevoked:
		if e.ClaimKind == "lock" {
			return slog.LevelDebug
		}
	}
	return slog.LevelInfo
}

// logEvent logs e through l at its level; the caller checked the level is
// enabled.
func logEvent(l *slog.Logger, e Event) {
	attrs := []slog.Attr{slog.String("session", string(e.Session)), slog.String("state", e.State.String())}
	switch e.Kind {
	case TermElected, TermRevoked:
		attrs = append(attrs, slog.String("name", e.Name), slog.String("token", strconv.FormatUint(e.Token, 10)))
		if e.ClaimKind != "" {
			attrs = append(attrs, slog.String("kind", e.ClaimKind))
		}
		if e.Reason != 0 {
			attrs = append(attrs, slog.String("reason", e.Reason.String()))
		}
	case SessionLeaseShortened:
		attrs = append(attrs, slog.Duration("granted", e.Remaining), slog.Duration("renew_every", e.RenewEvery))
	case SessionOpened, SessionRenewed:
		attrs = append(attrs, slog.Duration("remaining", e.Remaining), slog.Duration("renew_every", e.RenewEvery))
	case BackendQuarantined:
		attrs = append(attrs, slog.Duration("remaining", e.Remaining))
	case TermDeadlineNear:
		attrs = append(attrs, slog.String("name", e.Name), slog.String("token", strconv.FormatUint(e.Token, 10)), slog.Duration("remaining", e.Remaining))
	case LockDelayRefused:
		attrs = append(attrs, slog.String("name", e.Name), slog.String("kind", e.ClaimKind), slog.Duration("lock_delay", e.Remaining))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.Any("err", e.Err))
	}
	msg := "simba: " + e.Kind.String()
	if e.Kind == SessionLeaseShortened {
		msg = "simba: backend grants a shorter lease than two renewal periods; renewing more often"
	}
	if e.Kind == BackendQuarantined {
		msg = "simba: backend lost its records (or the namespace is new and not initialised); no lease is granted until every earlier term has ended"
	}
	l.LogAttrs(context.Background(), eventLevel(e), msg, attrs...)
}
