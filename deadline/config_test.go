package deadline

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	want := Config{
		LeaseDuration: 15 * time.Second,
		RenewInterval: 5 * time.Second,
		Drift:         0.01,
		Margin:        50 * time.Millisecond,
		RetryJitter:   2500 * time.Millisecond,
		MinBackoff:    100 * time.Millisecond,
	}
	if c != want {
		t.Fatalf("Config{}.WithDefaults() = %+v, want %+v", c, want)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: Validate() = %v, want nil", err)
	}
	// Derived defaults follow the fields actually set.
	c = Config{LeaseDuration: 3 * time.Second}.WithDefaults()
	if c.RenewInterval != time.Second || c.RetryJitter != 500*time.Millisecond {
		t.Fatalf("lease 3s: RenewInterval %v RetryJitter %v, want 1s and 500ms", c.RenewInterval, c.RetryJitter)
	}
	c = Config{Drift: Zero, Margin: Zero}.WithDefaults()
	if c.Drift != 0 || c.Margin != 0 {
		t.Fatalf("Zero drift/margin: got %v %v, want 0 0", c.Drift, c.Margin)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		rule string // substring of the error; "" = valid
	}{
		{"defaults", Config{}, ""},
		{"rule 1: 2 × 8s > 15s", Config{LeaseDuration: 15 * time.Second, RenewInterval: 8 * time.Second}, "RenewInterval × 2 ≤ LeaseDuration"},
		{"rule 1 holds at equality", Config{LeaseDuration: 10 * time.Second, RenewInterval: 5 * time.Second, Margin: Zero, Drift: Zero}, ""},
		{"rule 2: 1s × 0.51 − 50ms ≤ 0.5s", Config{LeaseDuration: time.Second, RenewInterval: 500 * time.Millisecond, Drift: 0.49, Margin: 50 * time.Millisecond}, "LeaseDuration × (1 − Drift) − Margin > RenewInterval"},
		{"drift 0.5 out of range", Config{Drift: 0.5}, "Drift must be in [0, 0.5)"},
		{"negative drift", Config{Drift: -0.1}, "Drift must be in [0, 0.5)"},
		{"negative lease", Config{LeaseDuration: -time.Second}, "LeaseDuration must be positive"},
		{"negative renew", Config{RenewInterval: -time.Second}, "RenewInterval must be positive"},
		{"negative margin", Config{Margin: -2}, "Margin must not be negative"},
		{"negative jitter", Config{RetryJitter: -time.Second}, "RetryJitter must not be negative"},
		{"negative backoff", Config{MinBackoff: -time.Second}, "MinBackoff must be positive"},
		// Defect 9 of issue 9: a MinBackoff longer than what is left after a
		// failed renewal means one failure ends every term.
		{"backoff longer than the validity", Config{MinBackoff: 10 * time.Second}, "MinBackoff < LeaseDuration × (1 − Drift) − Margin − RenewInterval"},
		{"lease too short for a renewal period", Config{LeaseDuration: 2, Drift: Zero, Margin: Zero}, "RenewInterval must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("Validate() = %v, want an ErrInvalidConfig naming %q", err, tc.rule)
			}
		})
	}
}

func TestMustValidPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustValid of an invalid config did not panic")
		}
	}()
	Config{Drift: 0.7}.MustValid()
}

// FuzzConfigValidate: Validate either refuses a config with ErrInvalidConfig
// or accepts one whose rules hold.
func FuzzConfigValidate(f *testing.F) {
	f.Add(int64(15e9), int64(5e9), 0.01, int64(50e6), int64(0), int64(0))
	f.Add(int64(1e9), int64(5e8), 0.49, int64(50e6), int64(0), int64(0))
	f.Add(int64(15e9), int64(8e9), 0.0, int64(-1), int64(-5), int64(1))
	f.Fuzz(func(t *testing.T, lease, renew int64, drift float64, margin, jitter, backoff int64) {
		c := Config{LeaseDuration: time.Duration(lease), RenewInterval: time.Duration(renew), Drift: drift,
			Margin: time.Duration(margin), RetryJitter: time.Duration(jitter), MinBackoff: time.Duration(backoff)}
		err := c.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate(%+v) = %v, not ErrInvalidConfig", c, err)
			}
			return
		}
		d := c.WithDefaults()
		if 2*d.RenewInterval > d.LeaseDuration || d.Validity(d.LeaseDuration) <= d.RenewInterval ||
			d.Drift < 0 || d.Drift >= 0.5 || d.Margin < 0 || d.LeaseDuration <= 0 || d.RenewInterval <= 0 {
			t.Fatalf("Validate accepted %+v (with defaults %+v), which breaks a rule", c, d)
		}
	})
}
