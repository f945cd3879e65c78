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
