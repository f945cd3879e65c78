package etcdsimba

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// ErrInvalidOption is wrapped by the errors [New] returns for an invalid
// option or argument.
var ErrInvalidOption = errors.New("etcdsimba: invalid option")

// ErrInvalidNamespace is wrapped by the error [New] returns for a
// namespace [ValidateNamespace] refuses.
var ErrInvalidNamespace = errors.New("etcdsimba: invalid namespace")

// DefaultMaxLease is the default of [WithMaxLease]: 30 s, as on every
// backend.
const DefaultMaxLease = 30 * time.Second

// An Option configures a [Backend] in [New].
type Option func(*config) error

type config struct {
	maxLease     time.Duration
	maxLockDelay time.Duration
	logger       *slog.Logger
	guard        guardMode
	// guardOn, guardOff: WithRevokeGuard, WithoutRevokeGuard was given
	// (both is an error).
	guardOn, guardOff bool
}

// guardMode is how a Backend decides the revoke guard of its grants
// (docs/adr/0305-etcd-revoke-guard-by-default.md).
type guardMode int

const (
	guardAuto   guardMode = iota // on until every member is proven fixed
	guardForced                  // WithRevokeGuard: always on
	guardOff                     // WithoutRevokeGuard: never on
)

// WithMaxLease sets the longest lease the backend grants (default
// [DefaultMaxLease]), which is also how long it grants nothing after
// finding the namespace's records lost (docs/adr/0130-quarantine-after-data-loss.md).
// Every Open and Renew reports at most d, whatever TTL the server gave the
// etcd lease. Use the same d in every process of a namespace: the process
// that finds a loss records its d as the quarantine everyone honours.
func WithMaxLease(d time.Duration) Option {
	return func(c *config) error {
		// At least a second: etcd lease TTLs and token high parts count
		// seconds (docs/adr/0208-etcd-epoch-tokens.md).
		if d < time.Second || d > 24*time.Hour {
			return fmt.Errorf("%w: WithMaxLease(%v): want [1s, 24h]", ErrInvalidOption, d)
		}
		c.maxLease = d
		return nil
	}
}

// MaxMaxLockDelay bounds [WithMaxLockDelay]: etcd lease TTLs are whole
// seconds in an int64, and a delay is a lease (ADR 0256); a day is far
// past any use.
const MaxMaxLockDelay = 24 * time.Hour

// WithMaxLockDelay sets the longest lock-delay an Acquire may ask for
// (driver.AcquireRequest.LockDelay; default 0, which refuses every
// positive delay with an error wrapping driver.ErrLockDelay). It also
// lengthens the quarantine after a loss of the namespace's records to
// MaxLease + d, since the delays are lost with the leases. Use the same d
// in every process of a namespace, as for [WithMaxLease].
//
// A term granted with a delay writes a marker key beside its lease key
// (<ns>/@simba/d/<name>); a release or Close deletes it in the same
// transaction. A candidate that finds the lease key gone but the marker
// there knows the term ended without a release: it replaces the marker,
// in one transaction, by the lease key itself put on a new etcd lease of
// the delay's length (whole seconds, raised to the server's minimum TTL),
// so the name reads as held until the server's lease clock ends it
// (docs/adr/0256-etcd-lock-delay.md).
func WithMaxLockDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxMaxLockDelay {
			return fmt.Errorf("%w: WithMaxLockDelay(%v): want [0, %v]", ErrInvalidOption, d, MaxMaxLockDelay)
		}
		c.maxLockDelay = d
		return nil
	}
}

// WithRevokeGuard forces the revoke guard on for every grant, whatever
// the etcd versions of the cluster's members. By default the guard is
// already on until the Backend has proven that every member runs a
// version that cannot revoke a lease early (3.4.31-3.4.33, 3.5.13-3.5.15:
// later releases skip the fix's leadership check after a pause, ADR 0320), so
// this option only matters where that proof is wrong or undesired: the
// guard then never turns off.
//
// The guard is for etcd servers that may revoke a lease before the TTL of
// its last renewal has run: a leader that was stalled (a long pause, a
// slow disk, SIGSTOP) and comes back proposes the revocation of every
// lease it thinks expired, and on every etcd but 3.4.31-3.4.33 and
// 3.5.13-3.5.15 the new leader may commit it (etcd-io/etcd#15247,
// docs/adr/0290-etcd-early-revoke-guard.md). Without the guard the
// candidate is then granted the name while the holder's term still runs:
// two holders for up to a lease.
//
// A guarded term carries a lock-delay marker of max(its LockDelay, its
// session's lease) (the mechanism of [WithMaxLockDelay], which it needs no
// setting of): a release or Close skips it, an expiry or revocation
// leaves it, and the first candidate to find the key gone holds the name
// on an etcd lease of that length. The cost: after a crash, a name is
// free one lease later than without the guard. It cannot be combined with
// [WithoutRevokeGuard].
func WithRevokeGuard() Option {
	return func(c *config) error {
		c.guardOn = true
		return nil
	}
}

// WithoutRevokeGuard turns the revoke guard off for good: no grant carries
// its marker, whatever the members' versions, so a holder's crashed
// names come free as soon as etcd expires its lease, with no extra lease
// of waiting. Use it only when every member runs etcd 3.4.31-3.4.33 or
// 3.5.13-3.5.15 and the default's proof cannot be made (the Backend cannot ask
// every member's Status), or when you accept the risk: on an affected
// version a leader that stalls longer than a lease and resumes can revoke
// a live holder's lease, and a candidate is then granted the name while
// the holder still believes in its term, for up to a lease
// (etcd-io/etcd#15247, docs/adr/0305-etcd-revoke-guard-by-default.md).
// The Backend still asks the versions, and logs an error for each member
// that runs an affected one. Names held by terms of other processes with
// the guard stay guarded. It cannot be combined with [WithRevokeGuard].
func WithoutRevokeGuard() Option {
	return func(c *config) error {
		c.guardOff = true
		return nil
	}
}

// WithLogger sets the logger for session and namespace events (a loss
// found, a quarantine, a watch restarted). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{maxLease: DefaultMaxLease}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	switch {
	case c.guardOn && c.guardOff:
		return config{}, fmt.Errorf("%w: WithRevokeGuard and WithoutRevokeGuard together: the revoke guard is either forced on or turned off, not both (ADR 0305)", ErrInvalidOption)
	case c.guardOn:
		c.guard = guardForced
	case c.guardOff:
		c.guard = guardOff
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// MaxNamespaceLen bounds a namespace, so every key the backend writes stays
// short next to etcd's limits.
const MaxNamespaceLen = 200

// ValidateNamespace checks a namespace: a key prefix such as "/simba/myapp",
// made of "/" and one or more segments of [A-Za-z0-9._-] (neither "." nor
// ".."), at most [MaxNamespaceLen] bytes, without a trailing "/".
//
// Every key of a namespace lives under <namespace>/@simba/, and '@' is not
// a namespace byte, so two valid namespaces never share a key, nested ones
// ("/a" and "/a/b") included: no namespace is a prefix of another's keys.
func ValidateNamespace(ns string) error {
	switch {
	case ns == "":
		return fmt.Errorf("%w: empty (want a key prefix such as /simba/myapp)", ErrInvalidNamespace)
	case len(ns) > MaxNamespaceLen:
		return fmt.Errorf("%w: %d bytes long, longer than %d", ErrInvalidNamespace, len(ns), MaxNamespaceLen)
	case ns[0] != '/':
		return fmt.Errorf("%w: %q does not start with /", ErrInvalidNamespace, ns)
	case ns == "/":
		return fmt.Errorf("%w: the root / is not a namespace (want /simba/myapp, say)", ErrInvalidNamespace)
	}
	for i, seg := range strings.Split(ns[1:], "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment %d (a doubled or trailing /)", ErrInvalidNamespace, ns, i+1)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q has the segment %q", ErrInvalidNamespace, ns, seg)
		}
		for j := 0; j < len(seg); j++ {
			if !nsByte(seg[j]) {
				return fmt.Errorf("%w: %q has byte %q in segment %q (want [A-Za-z0-9._-])", ErrInvalidNamespace, ns, seg[j], seg)
			}
		}
	}
	return nil
}

func nsByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-'
}

// keys are the namespace's key names.
type keys struct {
	base       string // <ns>/@simba/
	epoch      string // the epoch record
	quarantine string // present while a quarantine may be in force
	session    string // + session id: the session's owner, on its etcd lease
	lease      string // + name: a lease, on its session's etcd lease
	delay      string // + name: the lock-delay marker of a term granted with one (no etcd lease)
}

func newKeys(ns string) keys {
	base := ns + "/@simba/"
	return keys{base: base, epoch: base + "epoch", quarantine: base + "quarantine", session: base + "s/", lease: base + "l/", delay: base + "d/"}
}
