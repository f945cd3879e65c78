package fxsimba_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/fxsimba"
)

type appConfig struct {
	Simba fxsimba.Config `yaml:"simba" json:"simba"`
}

const appYAML = `
simba:
  session:
    leaseDuration: 9s
    renewInterval: 3s
    drift: 0
    margin: 20ms
    retryJitter: 1s
    minBackoff: 200ms
`

func TestConfigFromYAML(t *testing.T) {
	var c appConfig
	if err := yaml.Unmarshal([]byte(appYAML), &c); err != nil {
		t.Fatal(err)
	}
	d, err := c.Simba.Deadline()
	if err != nil {
		t.Fatal(err)
	}
	want := deadline.Config{LeaseDuration: 9 * time.Second, RenewInterval: 3 * time.Second, Drift: 0,
		Margin: 20 * time.Millisecond, RetryJitter: time.Second, MinBackoff: 200 * time.Millisecond}
	if got := d.WithDefaults(); got != want {
		t.Fatalf("Deadline().WithDefaults() = %+v, want %+v (drift 0 is an explicit zero)", got, want)
	}
	if d.Drift != deadline.Zero {
		t.Fatalf("Deadline().Drift = %v, want deadline.Zero for an explicit 0", d.Drift)
	}
}

func TestConfigFromJSONRoundTrip(t *testing.T) {
	in := `{"simba":{"session":{"leaseDuration":"30s","margin":"0s"}}}`
	var c appConfig
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	d, err := c.Simba.Deadline()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WithDefaults(); got.LeaseDuration != 30*time.Second || got.RenewInterval != 10*time.Second || got.Margin != 0 || got.Drift != 0.01 {
		t.Fatalf("Deadline().WithDefaults() = %+v, want 30s lease, 10s renewal, no margin, default drift", got)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Fatalf("Marshal = %s, want %s (unset keys omitted)", out, in)
	}
}

func TestDecodeErrorsNameTheRule(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"yaml not a duration", "simba: {session: {leaseDuration: fifteen}}", `write it like "15s"`},
		{"yaml negative", "simba: {session: {minBackoff: -1s}}", "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c appConfig
			err := yaml.Unmarshal([]byte(tc.doc), &c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unmarshal: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	var c appConfig
	if err := json.Unmarshal([]byte(`{"simba":{"session":{"retryJitter":"1 second"}}}`), &c); !errors.Is(err, fxsimba.ErrInvalidConfig) {
		t.Fatalf("json.Unmarshal: %v, want ErrInvalidConfig", err)
	}
}

// A struct filled by other means may hold what the parsers reject.
func TestDeadlineRejectsOutOfRangeFields(t *testing.T) {
	neg := fxsimba.Duration(-time.Second)
	bad := 0.7
	for _, tc := range []struct {
		name string
		s    fxsimba.SessionConfig
		want string
	}{
		{"negative lease", fxsimba.SessionConfig{LeaseDuration: neg}, "simba.session.leaseDuration must not be negative"},
		{"negative margin", fxsimba.SessionConfig{Margin: &neg}, "simba.session.margin must not be negative"},
		{"drift", fxsimba.SessionConfig{Drift: &bad}, "simba.session.drift must be in [0, 0.5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fxsimba.Config{Session: tc.s}.Deadline()
			if !errors.Is(err, fxsimba.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Deadline: %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	base := fxsimba.Config{Session: fxsimba.SessionConfig{LeaseDuration: fxsimba.Duration(9 * time.Second)}}
	vars := map[string]string{
		"SIMBA_SESSION_LEASE_DURATION": " 12s ",
		"SIMBA_SESSION_RENEW_INTERVAL": "",
		"SIMBA_SESSION_DRIFT":          "0.02",
		"SIMBA_SESSION_MARGIN":         "10ms",
		"SIMBA_SESSION_RETRY_JITTER":   "0",
		"SIMBA_SESSION_MIN_BACKOFF":    "3s",
		"SIMBA_SESSION_UNKNOWN":        "ignored",
	}
	c, err := base.ApplyEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Deadline()
	if err != nil {
		t.Fatal(err)
	}
	want := deadline.Config{LeaseDuration: 12 * time.Second, RenewInterval: 4 * time.Second, Drift: 0.02,
		Margin: 10 * time.Millisecond, RetryJitter: 2 * time.Second, MinBackoff: 3 * time.Second}
	if got := d.WithDefaults(); got != want {
		t.Fatalf("after ApplyEnv: %+v, want %+v (empty and zero values take defaults)", got, want)
	}
	if base.Session.LeaseDuration != fxsimba.Duration(9*time.Second) {
		t.Fatal("ApplyEnv changed its receiver")
	}

	// Every bad variable is reported, not just the first.
	_, err = fxsimba.Config{}.ApplyEnv(func(k string) (string, bool) { return "x", true })
	if !errors.Is(err, fxsimba.ErrInvalidConfig) {
		t.Fatalf("ApplyEnv: %v, want ErrInvalidConfig", err)
	}
	for _, k := range []string{"SIMBA_SESSION_LEASE_DURATION", "SIMBA_SESSION_RENEW_INTERVAL", "SIMBA_SESSION_DRIFT",
		"SIMBA_SESSION_MARGIN", "SIMBA_SESSION_RETRY_JITTER", "SIMBA_SESSION_MIN_BACKOFF"} {
		if !strings.Contains(err.Error(), k) {
			t.Fatalf("ApplyEnv: %v, want it to name %s", err, k)
		}
	}
}

// FuzzApplyEnv: whatever the environment holds, ApplyEnv and Deadline
// return an error wrapping ErrInvalidConfig or a configuration that
// deadline accepts, and never panic.
func FuzzApplyEnv(f *testing.F) {
	f.Add("15s", "5s", "0.01", "50ms", "2.5s", "100ms")
	f.Add("1s", "500ms", "0.49", "50ms", "", "")
	f.Add("15s", "8s", "0", "0s", "0", "1ns")
	f.Add("-1s", "NaN", "+Inf", "1e400h", "9223372036854775807ns", " ")
	f.Fuzz(func(t *testing.T, lease, renew, drift, margin, jitter, backoff string) {
		vars := map[string]string{
			"SIMBA_SESSION_LEASE_DURATION": lease, "SIMBA_SESSION_RENEW_INTERVAL": renew,
			"SIMBA_SESSION_DRIFT": drift, "SIMBA_SESSION_MARGIN": margin,
			"SIMBA_SESSION_RETRY_JITTER": jitter, "SIMBA_SESSION_MIN_BACKOFF": backoff,
		}
		c, err := fxsimba.Config{}.ApplyEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
		if err != nil {
			if !errors.Is(err, fxsimba.ErrInvalidConfig) {
				t.Fatalf("ApplyEnv: %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		d, err := c.Deadline()
		if err != nil {
			if !errors.Is(err, fxsimba.ErrInvalidConfig) {
				t.Fatalf("Deadline: %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("Deadline() = %+v accepted, but Validate: %v", d, err)
		}
		w := d.WithDefaults()
		if w.LeaseDuration <= 0 || w.RenewInterval <= 0 || w.MinBackoff <= 0 || w.Margin < 0 || w.Drift < 0 || w.Drift >= 0.5 {
			t.Fatalf("accepted an out-of-range configuration %+v", w)
		}
	})
}

// FuzzDurationText: a Duration decodes or fails with ErrInvalidConfig,
// is never negative, and what it encodes decodes to the same value.
func FuzzDurationText(f *testing.F) {
	for _, s := range []string{"15s", "0", "-1s", "1h2m3.5s", "", "1e3s", "9999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d fxsimba.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			if !errors.Is(err, fxsimba.ErrInvalidConfig) {
				t.Fatalf("UnmarshalText(%q): %v does not wrap ErrInvalidConfig", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("UnmarshalText(%q) = %v, negative", s, time.Duration(d))
		}
		b, _ := d.MarshalText()
		var back fxsimba.Duration
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Fatalf("round trip of %v via %q = %v, %v", time.Duration(d), b, time.Duration(back), err)
		}
	})
}
