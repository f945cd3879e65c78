package pgsimba_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// TestConformance runs the backend conformance kit against the real
// PostgreSQL server. Each kit namespace is a table prefix ("kt" + 8 hex
// digits is a valid one); each client is its own Backend value.
func TestConformance(t *testing.T) { runKit(t, false) }

// plantedEnv makes TestConformanceCatchesSkippedQuarantine's child run the
// kit on clients whose acquire routine skips the epoch check.
const plantedEnv = "SIMBA_SQL_PLANTED_NO_QUARANTINE"

// TestConformanceCatchesSkippedQuarantine: the kit's data-loss case fails
// on a backend whose acquire routine grants without checking the epoch
// row and markers (ADR 0130's rule, planted out).
func TestConformanceCatchesSkippedQuarantine(t *testing.T) {
	if os.Getenv(plantedEnv) == "" {
		sqltest.KitFails(t, plantedEnv, "TokensSurviveDataLoss")
		return
	}
	runKit(t, true)
}

// runKit runs the conformance kit; planted replaces each namespace's
// acquire routine by one without the quarantine.
func runKit(t *testing.T, planted bool) {
	const lease = 2 * time.Second
	// The lock-delay subtests (ADR 0251, 0252): a delay on the database's
	// clock from the session's expiry; the quarantine is lease + delay.
	const maxLockDelay = 1500 * time.Millisecond
	pool := newPool(t, pgURL(t), nil)
	var mu sync.Mutex
	prefixes := map[string]bool{}
	t.Cleanup(func() {
		for p := range prefixes {
			dropSchema(t, pool, p)
		}
	})
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			mu.Lock()
			prefixes[namespace] = true
			mu.Unlock()
			b, err := pgsimba.New(t.Context(), pool, pgsimba.WithNamespace(namespace), pgsimba.WithMaxLease(lease), pgsimba.WithMaxLockDelay(maxLockDelay))
			if err != nil {
				t.Fatalf("pgsimba.New(%q): %v", namespace, err)
			}
			if planted {
				ddl, err := pgsimba.AcquireWithoutQuarantine(namespace)
				if err == nil {
					_, err = pool.Exec(t.Context(), ddl)
				}
				if err != nil {
					t.Fatalf("planting the bug: %v", err)
				}
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b
		},
		Lease: lease,
		// The cap, and so the quarantine after a loss (ADR 0130, 0135).
		MaxLease:     lease,
		MaxLockDelay: maxLockDelay,
		// Data loss on SQL: the tables emptied. The quarantine follows,
		// then tokens keep rising.
		LoseData: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for p := range prefixes {
				if _, err := pool.Exec(t.Context(), "TRUNCATE "+p+"_sessions, "+p+"_leases, "+p+"_epoch"); err != nil {
					t.Fatalf("truncate %s: %v", p, err)
				}
			}
		},
	})
}
