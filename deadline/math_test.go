package deadline

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var defaults = Config{}.WithDefaults()

func at(sec float64) time.Time { return time.Unix(0, 0).Add(time.Duration(sec * float64(time.Second))) }

// Worked numbers from docs/design.md §8.
func TestDeadlineWorkedExample(t *testing.T) {
	got := defaults.Deadline(at(100), 15*time.Second)
	if want := at(114.8); !got.Equal(want) {
		t.Fatalf("Deadline(100s, 15s) = %v, want %v", got.Sub(at(0)), want.Sub(at(0)))
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct{ left, want time.Duration }{
		{8 * time.Second, 4 * time.Second},
		{20 * time.Second, 5 * time.Second}, // capped at RenewInterval
		{time.Second, 500 * time.Millisecond},
		{150 * time.Millisecond, 100 * time.Millisecond}, // floored at MinBackoff
	} {
		if got := defaults.Backoff(tc.left); got != tc.want {
			t.Errorf("Backoff(%v) = %v, want %v", tc.left, got, tc.want)
		}
	}
}

func TestRenewEvery(t *testing.T) {
	for _, tc := range []struct {
		granted   time.Duration
		want      time.Duration
		shortened bool
	}{
		{15 * time.Second, 5 * time.Second, false},
		// ZooKeeper, 15s negotiated: 6.25s granted, validity 6.1375s.
		{6250 * time.Millisecond, 2045833333, true},
		// maxSessionTimeout 6s: 2.5s granted, validity 2.425s.
		{2500 * time.Millisecond, 808333333, true},
		// Two renewals just fit: 10.2s × 0.99 − 0.05s = 10.048s ≥ 10s.
		{10200 * time.Millisecond, 5 * time.Second, false},
		// Just not: 10.15s × 0.99 − 0.05s = 9.9985s < 10s.
		{10150 * time.Millisecond, 3332833333, true},
	} {
		got, short := defaults.RenewEvery(tc.granted)
		if got != tc.want || short != tc.shortened {
			t.Errorf("RenewEvery(%v) = %v, %v; want %v, %v", tc.granted, got, short, tc.want, tc.shortened)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		jitter float64
		want   time.Duration
	}{
		{0, 2500 * time.Millisecond},
		{0.5, 3750 * time.Millisecond},
		{0.999999, 4999997500 * time.Nanosecond},
		{1, 2500 * time.Millisecond},  // out of range: no jitter
		{-1, 2500 * time.Millisecond}, // out of range: no jitter
	} {
		if got := defaults.RetryDelay(tc.jitter); got != tc.want {
			t.Errorf("RetryDelay(%v) = %v, want %v", tc.jitter, got, tc.want)
		}
	}
}

// TestDeadlineBeforeBackendExpiry is the property behind the formula: for
// every send and receive delay and every node clock rate within 1 ± drift
// of the backend's, the local deadline passes (in true time) before the
// backend expires the session.
func TestDeadlineBeforeBackendExpiry(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		c := Config{
			LeaseDuration: time.Duration(1+rng.IntN(60000)) * time.Millisecond,
			Drift:         rng.Float64() * 0.49,
			Margin:        time.Duration(rng.IntN(200)) * time.Millisecond,
		}
		c.RenewInterval = c.LeaseDuration / 4
		if c.Margin == 0 {
			c.Margin = Zero
		}
		c = c.WithDefaults()
		// True time in seconds. The request leaves at trueSend, reaches the
		// backend after up, which measures remaining on its own clock and
		// expires the session remaining (backend seconds) later.
		trueSend := rng.Float64() * 1000
		up := rng.Float64() * 5
		// The backend's clock rate relative to true time, and the node's,
		// differ by at most drift: node/backend in [1−drift, 1+drift].
		backendRate := 0.5 + rng.Float64()
		ratio := 1 - c.Drift + rng.Float64()*2*c.Drift
		if i%3 == 0 {
			ratio = 1 - c.Drift // the worst case: the node's clock runs slow
		}
		nodeRate := backendRate * ratio
		remaining := time.Duration(rng.Int64N(int64(c.LeaseDuration)) + 1)
		trueExpiry := trueSend + up + remaining.Seconds()/backendRate

		nodeSend := at(trueSend * nodeRate)
		local := c.Deadline(nodeSend, remaining)
		trueDeadline := local.Sub(at(0)).Seconds() / nodeRate
		if trueDeadline > trueExpiry+1e-6 {
			t.Fatalf("case %d: config %+v remaining %v up %.3fs rates node %.4f backend %.4f: local deadline at true %.6fs after backend expiry %.6fs",
				i, c, remaining, up, nodeRate, backendRate, trueDeadline, trueExpiry)
		}
	}
}

// With drift beyond the configured bound, the property fails: the check
// above can catch a wrong formula.
func TestDeadlinePropertyCanFail(t *testing.T) {
	c := Config{Drift: 0.01, Margin: Zero}.WithDefaults()
	nodeRate := 0.95 // 5% slow, beyond 1%
	remaining := 15 * time.Second
	trueExpiry := 100 + remaining.Seconds()
	local := c.Deadline(at(100*nodeRate), remaining)
	if trueDeadline := local.Sub(at(0)).Seconds() / nodeRate; trueDeadline <= trueExpiry {
		t.Fatalf("a node 5%% slow with drift 1%% kept its deadline (%.3f) before expiry (%.3f); the property test would be blind", trueDeadline, trueExpiry)
	}
}

// Defect 2 of issue 9: with Drift zero, Validity(math.MinInt64) wrapped to
// about +292 years. A grant is clamped to [0, LeaseDuration] and the
// arithmetic saturates: no reply, however absurd, lengthens a life beyond
// the lease asked for.
func TestValidityIsClampedToTheLease(t *testing.T) {
	for _, c := range []Config{defaults, Config{Drift: Zero, Margin: Zero}.WithDefaults()} {
		for _, remaining := range []time.Duration{math.MinInt64, -time.Second, 0, c.LeaseDuration, math.MaxInt64, 1000 * c.LeaseDuration} {
			v := c.Validity(remaining)
			if v > c.Validity(c.LeaseDuration) {
				t.Errorf("drift %v margin %v: Validity(%v) = %v, more than a full lease's %v", c.Drift, c.Margin, remaining, v, c.Validity(c.LeaseDuration))
			}
			if remaining <= 0 && v > 0 {
				t.Errorf("drift %v margin %v: Validity(%v) = %v, want ≤ 0 for a grant of nothing", c.Drift, c.Margin, remaining, v)
			}
			if d := c.Deadline(at(100), remaining); d.After(at(100).Add(c.Validity(c.LeaseDuration))) || d.Before(at(100).Add(-c.Margin)) {
				t.Errorf("drift %v: Deadline(100s, %v) = %v, outside [sent − margin, sent + a full lease's validity]", c.Drift, remaining, d.Sub(at(0)))
			}
		}
	}
}
