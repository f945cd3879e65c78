package backendtest

import (
	"slices"
	"testing"
)

// cases are the Promises subtests, in the order they run.
var cases = slices.Concat(sessionCases, leaseCases, lockDelayCases, broadcastCases, inspectCases, namespaceCases)

// testCase is one promise and the subtest that checks it.
type testCase struct {
	name    string
	promise string
	// waits marks subtests that let the backend's time pass; in real time
	// they run in parallel with each other.
	waits bool
	f     func(e *env)
}

// Run checks that the backend cfg describes keeps every promise of
// [driver.Backend], one subtest per promise, each in a fresh namespace.
// It fails t at once if cfg lacks NewBackend or a positive Lease.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.NewBackend == nil {
		t.Fatal("backendtest: Config.NewBackend is nil")
	}
	if cfg.Lease <= 0 {
		t.Fatalf("backendtest: Config.Lease = %v, want a positive duration", cfg.Lease)
	}
	if cfg.MaxLease < 0 {
		t.Fatalf("backendtest: Config.MaxLease = %v, want zero or positive", cfg.MaxLease)
	}
	if cfg.MaxLockDelay < 0 {
		t.Fatalf("backendtest: Config.MaxLockDelay = %v, want zero or positive", cfg.MaxLockDelay)
	}
	if cfg.Init != nil && cfg.MaxLease == 0 {
		t.Fatal("backendtest: Config.Init is set but MaxLease is zero: a backend that quarantines new namespaces must say how long")
	}
	cfg = cfg.withDefaults()
	parallel := cfg.Advance == nil
	// The group returns only when its parallel subtests are done, so the
	// data-loss subtest below never wipes a namespace still in use.
	t.Run("Promises", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.waits && parallel {
					t.Parallel()
				}
				tc.f(&env{t: t, cfg: cfg, ns: newNamespace(), promise: tc.promise})
			})
		}
	})
	if cfg.LoseData != nil {
		t.Run(dataLoss.name, func(t *testing.T) {
			dataLoss.f(&env{t: t, cfg: cfg, ns: newNamespace(), promise: dataLoss.promise})
		})
	}
}
