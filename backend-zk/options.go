package zksimba

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ErrInvalidOption is wrapped by the errors [New] returns for an invalid
// option or argument.
var ErrInvalidOption = errors.New("zksimba: invalid option")

// ErrNotAuthorized is wrapped by the error of a call whose credentials the
// namespace's ACL refuses (no [WithDigestAuth], or a wrong password): a
// permanent error, which [Backend.Open] reports at once rather than a
// later renewal. It also wraps go-zookeeper's zk.ErrNoAuth.
var ErrNotAuthorized = errors.New("zksimba: credentials refused by the namespace's ACL")

// An Option configures a [Backend] in [New].
type Option func(*config) error

// DefaultMaxLease is the default of [WithMaxLease]: 30 s, as on every
// backend, and below ZooKeeper's own default maxSessionTimeout (40 s: 20
// ticks of the default 2 s tickTime), so a server with default settings
// never clamps it.
const DefaultMaxLease = 30 * time.Second

type config struct {
	maxLease       time.Duration
	maxLockDelay   time.Duration
	user, password string
	acl            []zk.ACL
	logger         *slog.Logger
	dial           zk.Dialer
}

// WithDigestAuth authenticates every session with ZooKeeper's digest scheme
// (user:password) and, unless [WithACL] says otherwise, protects the
// namespace root and lease nodes with a digest ACL granting all
// permissions to that user only, so that no other client can delete or
// forge a lease. Missing parents of the root are created open to all
// (world:anyone), so other applications can put their roots beside it.
// Open fails with an error wrapping [ErrNotAuthorized] if the credentials
// cannot read an existing root.
func WithDigestAuth(user, password string) Option {
	return func(c *config) error {
		if user == "" || strings.Contains(user, ":") {
			return fmt.Errorf("%w: digest user must be non-empty and contain no ':'", ErrInvalidOption)
		}
		c.user, c.password = user, password
		return nil
	}
}

// WithACL sets the ACL of the namespace nodes the backend creates and of
// every lease node. The default is world:anyone with all permissions, or
// the digest ACL of [WithDigestAuth] when that is set. The ACL must let
// the backend's own sessions create, read and delete.
func WithACL(acl ...zk.ACL) Option {
	return func(c *config) error {
		if len(acl) == 0 {
			return fmt.Errorf("%w: WithACL needs at least one ACL entry", ErrInvalidOption)
		}
		c.acl = append([]zk.ACL(nil), acl...)
		return nil
	}
}

// WithMaxLease sets the longest lease the backend grants (default
// [DefaultMaxLease]), which is also how long it grants nothing after
// finding the namespace's records lost (docs/adr/0130-quarantine-after-data-loss.md).
// On ZooKeeper the lease is the session timeout: Open asks for at most d,
// and refuses a session the server negotiated above d (its
// minSessionTimeout is higher). The server caps the timeout at its own
// maxSessionTimeout, so d at or above maxSessionTimeout never clamps, and
// setting d to maxSessionTimeout makes the quarantine as short as the
// server's sessions allow. Every renewal grants 5/12 of the timeout, so
// every holder's belief ends within 5/12 × d of its last renewal: the
// quarantine of d covers it with room to spare. Use the same d in every
// process of a namespace: the process that finds the loss records its d
// as the quarantine.
func WithMaxLease(d time.Duration) Option {
	return func(c *config) error {
		// At least a second: tokens count seconds (ADR 0138), so a
		// quarantine shorter than a second could not end before the
		// epoch's first token second.
		if d < time.Second || d > time.Duration(1<<31-1)*time.Millisecond {
			return fmt.Errorf("%w: WithMaxLease(%v): want [1s, 2^31ms)", ErrInvalidOption, d)
		}
		c.maxLease = d
		return nil
	}
}

// MaxMaxLockDelay bounds [WithMaxLockDelay]: a day is far past any use.
const MaxMaxLockDelay = 24 * time.Hour

// WithMaxLockDelay sets the longest lock-delay an Acquire may ask for
// (driver.AcquireRequest.LockDelay; default 0, which refuses every
// positive delay with an error wrapping driver.ErrLockDelay). It also
// lengthens the quarantine after a loss of the namespace's records to
// MaxLease + d, since the delays are lost with the leases. Use the same d
// in every process of a namespace, as for [WithMaxLease].
//
// A term granted with a delay creates a persistent marker node
// <root>/@delay/<name> in its granting multi; a release or Close deletes
// it in the multi that deletes the lease node. A candidate that finds the
// lease node gone but the marker there knows the term ended without a
// release: it marks the marker seen (a write: its mtime is the ZooKeeper
// leader's time of finding the end), and the name is refused until a
// later write's time (the candidate's own lease node's ctime) shows the
// delay has passed since; never a candidate's clock
// (docs/adr/0257-zk-lock-delay.md).
func WithMaxLockDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxMaxLockDelay {
			return fmt.Errorf("%w: WithMaxLockDelay(%v): want [0, %v]", ErrInvalidOption, d, MaxMaxLockDelay)
		}
		c.maxLockDelay = d
		return nil
	}
}

// WithLogger sets the logger for session events (expiry, reconnection) and
// for go-zookeeper's own messages, which are logged at debug level. The
// default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// WithDialer sets how TCP connections to the servers are dialled (for
// example through TLS). The backend wraps it to read each connect response.
func WithDialer(d zk.Dialer) Option {
	return func(c *config) error {
		if d == nil {
			return fmt.Errorf("%w: WithDialer(nil)", ErrInvalidOption)
		}
		c.dial = d
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{dial: net.DialTimeout, maxLease: DefaultMaxLease}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.acl == nil {
		if c.user != "" {
			c.acl = zk.DigestACL(zk.PermAll, c.user, c.password)
		} else {
			c.acl = zk.WorldACL(zk.PermAll)
		}
	}
	return c, nil
}

// zkLogger sends go-zookeeper's messages to slog at debug level: they are
// connection chatter, and what matters is reported by the backend itself.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug(fmt.Sprintf(format, args...), "component", "go-zookeeper")
}
