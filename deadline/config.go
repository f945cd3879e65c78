package deadline

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of [Config]. A zero field of Config takes the default listed here
// (RenewInterval, RetryJitter derive from the lease duration and renewal
// period actually in force).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultDrift         = 0.01
	DefaultMargin        = 50 * time.Millisecond
	DefaultMinBackoff    = 100 * time.Millisecond
)

// Zero asks for an explicit zero where a Config field's zero value means
// "the default". Set Drift or Margin to Zero (any negative value is
// rejected except this one) to really use no drift or no margin.
const Zero = -1

// ErrInvalidConfig is wrapped by every error [Config.Validate] returns.
var ErrInvalidConfig = errors.New("simba: invalid config")

// Config is the session timing. Its zero value is the default
// configuration: copy a Config and change fields to derive variants.
type Config struct {
	// LeaseDuration is how long the backend keeps a session alive after its
	// last renewal. It bounds failover time after a crash. Default 15s.
	LeaseDuration time.Duration
	// RenewInterval is the renewal period, and the timeout of every backend
	// call. Default LeaseDuration/3.
	RenewInterval time.Duration
	// Drift bounds the rate difference between the node's and the backend's
	// clocks, in [0, 0.5). Default 0.01; use [Zero] for none.
	Drift float64
	// Margin is a fixed safety margin taken off every deadline.
	// Default 50ms; use [Zero] for none.
	Margin time.Duration
	// RetryJitter is the range of the random delay added to a candidate's
	// retry period. Default RenewInterval/2.
	RetryJitter time.Duration
	// MinBackoff is the shortest wait before retrying a failed renewal.
	// Default 100ms.
	MinBackoff time.Duration
}

// WithDefaults returns c with every zero field replaced by its default and
// every [Zero] by an actual zero. It does not validate.
func (c Config) WithDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 3
	}
	switch c.Drift {
	case 0:
		c.Drift = DefaultDrift
	case Zero:
		c.Drift = 0
	}
	switch c.Margin {
	case 0:
		c.Margin = DefaultMargin
	case Zero:
		c.Margin = 0
	}
	if c.RetryJitter == 0 {
		c.RetryJitter = c.RenewInterval / 2
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	return c
}

// Validate reports whether c, with defaults applied, is usable. The error
// wraps [ErrInvalidConfig] and names the rule that failed and the values.
//
// The rules: durations are positive; drift is in [0, 0.5);
// RenewInterval × 2 ≤ LeaseDuration (two renewal attempts fit before the
// deadline); LeaseDuration × (1 − Drift) − Margin > RenewInterval (otherwise
// every term would end before the next renewal); MinBackoff < LeaseDuration
// × (1 − Drift) − Margin − RenewInterval (a renewal that fails when due can
// be retried before the deadline).
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.LeaseDuration <= 0:
		return bad("LeaseDuration must be positive, got %v", c.LeaseDuration)
	case c.RenewInterval <= 0:
		return bad("RenewInterval must be positive, got %v", c.RenewInterval)
	case c.Drift != c.Drift || c.Drift < 0 || c.Drift >= 0.5:
		return bad("Drift must be in [0, 0.5), got %v", c.Drift)
	case c.Margin < 0:
		return bad("Margin must not be negative (use deadline.Zero for none), got %v", c.Margin)
	case c.RetryJitter < 0:
		return bad("RetryJitter must not be negative, got %v", c.RetryJitter)
	case c.MinBackoff <= 0:
		return bad("MinBackoff must be positive, got %v", c.MinBackoff)
	case c.RenewInterval > c.LeaseDuration/2 || 2*c.RenewInterval > c.LeaseDuration:
		return bad("RenewInterval × 2 ≤ LeaseDuration does not hold: 2 × %v > %v", c.RenewInterval, c.LeaseDuration)
	}
	v := c.Validity(c.LeaseDuration)
	if v <= c.RenewInterval {
		return bad("LeaseDuration × (1 − Drift) − Margin > RenewInterval does not hold: %v × %v − %v = %v ≤ %v",
			c.LeaseDuration, 1-c.Drift, c.Margin, v, c.RenewInterval)
	}
	// A renewal that fails when due leaves v − RenewInterval until the
	// deadline; a retry must fit in it, or one failure ends every term.
	if c.MinBackoff >= v-c.RenewInterval {
		return bad("MinBackoff < LeaseDuration × (1 − Drift) − Margin − RenewInterval does not hold: %v ≥ %v − %v",
			c.MinBackoff, v, c.RenewInterval)
	}
	return nil
}

// MustValid is Validate for configurations written into a program: it
// returns c with defaults applied, or panics.
func (c Config) MustValid() Config {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c.WithDefaults()
}
