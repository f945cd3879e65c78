package memory

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// ErrInvalidOption is wrapped by the error [New] returns for an invalid
// option.
var ErrInvalidOption = errors.New("memory: invalid option")

// An Option configures a [Backend] made by [New].
type Option func(*config)

type config struct {
	clock             deadline.Clock
	newID             func() driver.ID
	maxLease          time.Duration
	maxLockDelay      time.Duration
	grantNum, grantDn int64
	noEpochs          bool
	noQuarantine      bool
	uninitialised     bool
}

// DefaultMaxLease is the cap on the granted lease when [WithMaxLease] is
// not given (or given zero): every backend caps its grants, because the
// quarantine after a data loss lasts one maximum lease (ADR 0130), and an
// uncapped lease would make it unbounded. Twice the engine's default lease
// of 15s.
const DefaultMaxLease = 30 * time.Second

// WithClock sets the clock that measures session lifetimes. Default: the
// system clock.
func WithClock(c deadline.Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithIDSource sets the source of session ids, so that a seeded simulation
// is reproducible. The backend refuses to open a session under an id it has
// handed out before ([ErrDuplicateID]). Default: 128 random bits from
// crypto/rand, in hex.
func WithIDSource(next func() driver.ID) Option {
	return func(cfg *config) { cfg.newID = next }
}

// WithMaxLease caps the lease duration the backend grants, as ZooKeeper's
// maxSessionTimeout does, and sets the length of the quarantine after a
// data loss ([Backend.LoseData]): a session granted before the loss was
// told it had at most this long, so once this long has passed on the
// backend's clock since the loss was noticed, no session still believes in
// a term from before it (ADR 0130). Zero means [DefaultMaxLease].
func WithMaxLease(d time.Duration) Option {
	return func(cfg *config) { cfg.maxLease = d }
}

// WithMaxLockDelay sets the longest lock-delay
// ([driver.AcquireRequest.LockDelay]) the backend honours, the same option
// on every backend. An Acquire asking for more (or for a negative delay)
// fails with an error wrapping [driver.ErrLockDelay] and changes nothing.
// It is a backend option, not only a candidate's, because it bounds what
// the backend must remember: the quarantine after a data loss lasts the
// maximum lease plus this maximum, since the lost records took their delays
// with them (ADR 0240). Default 0: every positive delay is refused.
func WithMaxLockDelay(d time.Duration) Option {
	return func(cfg *config) { cfg.maxLockDelay = d }
}

// WithGrantFraction makes the backend report only num/den of the time a
// session really has left, as the ZooKeeper backend reports 5/12 of the
// session timeout. Sessions still expire after the full granted lease.
// Default 1/1.
func WithGrantFraction(num, den int) Option {
	return func(cfg *config) { cfg.grantNum, cfg.grantDn = int64(num), int64(den) }
}

// WithoutTokenEpochs turns off the token epoch, so that tokens restart at 1
// after [Backend.LoseData] with keepTokens false. It models a broken
// backend: it exists so that tests can check that they catch one.
func WithoutTokenEpochs() Option {
	return func(cfg *config) { cfg.noEpochs = true }
}

// WithoutQuarantine turns off the quarantine after [Backend.LoseData]:
// Acquire grants at once on the emptied namespace although sessions from
// before the loss may still believe in their terms. It models a broken
// backend: it exists so that tests can check that they catch one.
func WithoutQuarantine() Option {
	return func(cfg *config) { cfg.noQuarantine = true }
}

// WithUninitialisedNamespace makes [New] return a namespace whose epoch
// record does not exist yet, as a Redis or ZooKeeper namespace nobody has
// used looks like (it cannot be told from one that lost its data): the
// first Acquire is quarantined for one maximum lease unless [Backend.Init]
// created the record first. Without this option New's namespace is
// initialised: nothing existed before it.
func WithUninitialisedNamespace() Option {
	return func(cfg *config) { cfg.uninitialised = true }
}

func (c *config) validate() error {
	switch {
	case c.clock == nil:
		return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
	case c.newID == nil:
		return fmt.Errorf("%w: WithIDSource(nil)", ErrInvalidOption)
	case c.maxLease < 0:
		return fmt.Errorf("%w: WithMaxLease(%v): must not be negative", ErrInvalidOption, c.maxLease)
	case c.maxLockDelay < 0:
		return fmt.Errorf("%w: WithMaxLockDelay(%v): must not be negative", ErrInvalidOption, c.maxLockDelay)
	case c.grantNum <= 0 || c.grantDn <= 0 || c.grantNum > c.grantDn:
		return fmt.Errorf("%w: WithGrantFraction(%d, %d): want 0 < num ≤ den", ErrInvalidOption, c.grantNum, c.grantDn)
	}
	return nil
}

// randomID is the default id source: 128 bits from crypto/rand, which never
// fails (it panics on a broken system source rather than return an error).
func randomID() driver.ID {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return driver.ID(hex.EncodeToString(b[:]))
}
