package fxsimba

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba/deadline"
)

// ErrInvalidConfig is wrapped by every configuration error of this package:
// a value that does not parse, and (through [deadline.ErrInvalidConfig],
// which such errors also wrap) a combination that breaks a timing rule.
var ErrInvalidConfig = errors.New("fxsimba: invalid config")

// Config is the application configuration under the key "simba", for
// applications that decode their configuration file into a struct:
//
//	type AppConfig struct {
//		Simba fxsimba.Config `yaml:"simba" json:"simba"`
//	}
//
// reads
//
//	simba:
//	  session:
//	    leaseDuration: 15s
//	    renewInterval: 5s
//	    drift: 0.01
//	    margin: 50ms
//	    retryJitter: 2.5s
//	    minBackoff: 100ms
//
// Any decoder that honours encoding.TextUnmarshaler (encoding/json,
// gopkg.in/yaml.v3, …) fills it; this package needs none. A zero or absent
// field takes the default of [deadline.Config].
type Config struct {
	Session SessionConfig `yaml:"session" json:"session"`
}

// SessionConfig holds the simba.session.* keys: the session timing of
// [deadline.Config], where the semantics and defaults are documented.
type SessionConfig struct {
	// LeaseDuration: simba.session.leaseDuration, SIMBA_SESSION_LEASE_DURATION.
	LeaseDuration Duration `yaml:"leaseDuration,omitempty" json:"leaseDuration,omitempty"`
	// RenewInterval: simba.session.renewInterval, SIMBA_SESSION_RENEW_INTERVAL.
	RenewInterval Duration `yaml:"renewInterval,omitempty" json:"renewInterval,omitempty"`
	// Drift: simba.session.drift, SIMBA_SESSION_DRIFT. A pointer because 0
	// is a meaningful value (no drift), distinct from "not set".
	Drift *float64 `yaml:"drift,omitempty" json:"drift,omitempty"`
	// Margin: simba.session.margin, SIMBA_SESSION_MARGIN. A pointer because
	// 0s is a meaningful value (no margin), distinct from "not set".
	Margin *Duration `yaml:"margin,omitempty" json:"margin,omitempty"`
	// RetryJitter: simba.session.retryJitter, SIMBA_SESSION_RETRY_JITTER.
	RetryJitter Duration `yaml:"retryJitter,omitempty" json:"retryJitter,omitempty"`
	// MinBackoff: simba.session.minBackoff, SIMBA_SESSION_MIN_BACKOFF.
	MinBackoff Duration `yaml:"minBackoff,omitempty" json:"minBackoff,omitempty"`
}

// Duration is a time.Duration written as text, such as "15s" or "1m30s"
// (Go's duration syntax), in configuration files. It is never negative.
type Duration time.Duration

// MarshalText writes the duration like time.Duration.String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a duration such as "15s". Negative durations are
// rejected.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// parseDuration accepts Go's duration syntax for a value that is not
// negative. Plain "0" is accepted too (time.ParseDuration does).
func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a duration (write it like \"15s\", \"500ms\" or \"1m30s\")", ErrInvalidConfig, s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%w: %q: a duration must not be negative", ErrInvalidConfig, s)
	}
	return v, nil
}

// parseDrift accepts a number in [0, 0.5).
func parseDrift(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || v < 0 || v >= 0.5 {
		return 0, fmt.Errorf("%w: %q: drift must be a number in [0, 0.5), such as 0.01", ErrInvalidConfig, s)
	}
	return v, nil
}

// The keys, in the order of SessionConfig; env is the variable, key the
// configuration key, field the name deadline's errors use.
var keys = []struct{ env, key, field string }{
	{"SIMBA_SESSION_LEASE_DURATION", "simba.session.leaseDuration", "LeaseDuration"},
	{"SIMBA_SESSION_RENEW_INTERVAL", "simba.session.renewInterval", "RenewInterval"},
	{"SIMBA_SESSION_DRIFT", "simba.session.drift", "Drift"},
	{"SIMBA_SESSION_MARGIN", "simba.session.margin", "Margin"},
	{"SIMBA_SESSION_RETRY_JITTER", "simba.session.retryJitter", "RetryJitter"},
	{"SIMBA_SESSION_MIN_BACKOFF", "simba.session.minBackoff", "MinBackoff"},
}

// LookupEnv reads an environment variable, like os.LookupEnv.
type LookupEnv func(key string) (value string, ok bool)

// ApplyEnv returns c with every SIMBA_SESSION_* variable that lookup finds
// set overriding the matching field, as Spring Boot lets the environment
// override a configuration file:
//
//	SIMBA_SESSION_LEASE_DURATION  simba.session.leaseDuration  e.g. 15s
//	SIMBA_SESSION_RENEW_INTERVAL  simba.session.renewInterval  e.g. 5s
//	SIMBA_SESSION_DRIFT           simba.session.drift          e.g. 0.01
//	SIMBA_SESSION_MARGIN          simba.session.margin         e.g. 50ms
//	SIMBA_SESSION_RETRY_JITTER    simba.session.retryJitter    e.g. 2.5s
//	SIMBA_SESSION_MIN_BACKOFF     simba.session.minBackoff     e.g. 100ms
//
// An empty variable counts as unset. A value that does not parse is an
// error wrapping [ErrInvalidConfig] that names the variable and the rule.
// ApplyEnv does not check the timing rules: [Config.Deadline] does.
func (c Config) ApplyEnv(lookup LookupEnv) (Config, error) {
	var errs []error
	s := &c.Session
	for i, k := range keys {
		v, ok := lookup(k.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		if i == 2 {
			d, err := parseDrift(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", k.env, k.key, err))
				continue
			}
			s.Drift = &d
			continue
		}
		d, err := parseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", k.env, k.key, err))
			continue
		}
		dd := Duration(d)
		switch i {
		case 0:
			s.LeaseDuration = dd
		case 1:
			s.RenewInterval = dd
		case 3:
			s.Margin = &dd
		case 4:
			s.RetryJitter = dd
		case 5:
			s.MinBackoff = dd
		}
	}
	return c, errors.Join(errs...)
}

// Deadline converts c to the session timing for session.WithConfig and
// checks it with [deadline.Config.Validate]. As in deadline.Config, a zero
// field means the default, and an explicit 0 drift or margin becomes
// [deadline.Zero]: apply deadline.Config.WithDefaults to read the values
// in force. The error wraps
// [ErrInvalidConfig] and [deadline.ErrInvalidConfig] and states the rule
// that failed in terms of the simba.session.* keys.
func (c Config) Deadline() (deadline.Config, error) {
	s := c.Session
	d := deadline.Config{
		LeaseDuration: time.Duration(s.LeaseDuration),
		RenewInterval: time.Duration(s.RenewInterval),
		RetryJitter:   time.Duration(s.RetryJitter),
		MinBackoff:    time.Duration(s.MinBackoff),
	}
	// A decoded struct may hold what the parsers above reject.
	for _, v := range []struct {
		key string
		d   Duration
	}{{keys[0].key, s.LeaseDuration}, {keys[1].key, s.RenewInterval}, {keys[4].key, s.RetryJitter}, {keys[5].key, s.MinBackoff}} {
		if v.d < 0 {
			return deadline.Config{}, fmt.Errorf("%w: %s must not be negative, got %v", ErrInvalidConfig, v.key, time.Duration(v.d))
		}
	}
	if s.Drift != nil {
		if *s.Drift != *s.Drift || *s.Drift < 0 || *s.Drift >= 0.5 {
			return deadline.Config{}, fmt.Errorf("%w: %s must be in [0, 0.5), got %v", ErrInvalidConfig, keys[2].key, *s.Drift)
		}
		d.Drift = *s.Drift
		if d.Drift == 0 {
			d.Drift = deadline.Zero // an explicit 0, not "the default"
		}
	}
	if s.Margin != nil {
		if *s.Margin < 0 {
			return deadline.Config{}, fmt.Errorf("%w: %s must not be negative, got %v", ErrInvalidConfig, keys[3].key, time.Duration(*s.Margin))
		}
		d.Margin = time.Duration(*s.Margin)
		if d.Margin == 0 {
			d.Margin = deadline.Zero
		}
	}
	if err := d.Validate(); err != nil {
		return deadline.Config{}, &ruleError{err: err}
	}
	return d, nil
}

// ruleError restates a deadline rule in configuration keys while keeping
// deadline.ErrInvalidConfig reachable through errors.Is.
type ruleError struct{ err error }

var keyNames = func() *strings.Replacer {
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k.field, k.key)
	}
	return strings.NewReplacer(pairs...)
}()

func (e *ruleError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), deadline.ErrInvalidConfig.Error()+": ")
	return ErrInvalidConfig.Error() + ": " + keyNames.Replace(msg)
}

func (e *ruleError) Unwrap() []error { return []error{ErrInvalidConfig, e.err} }
