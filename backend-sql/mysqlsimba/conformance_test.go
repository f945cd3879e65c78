package mysqlsimba_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// TestConformance runs the backend conformance kit against the real
// MariaDB/MySQL server. Each kit namespace is a table prefix; each client
// is its own Backend value.
func TestConformance(t *testing.T) { runKit(t, false) }

// TestConformanceNotifier runs the kit against Notifiers, which push
// release notices (ADR 0145): the kit's BroadcastOnRelease case too.
func TestConformanceNotifier(t *testing.T) { runKitWith(t, false, false, true) }

// TestConformanceMixedRoutines runs the kit with every second client
// calling the version 3 routines (acquire_v2, release_v2), as a process on
// MySQL or one not yet upgraded to schema version 4 does, beside clients
// calling the version 4 ones under SET STATEMENT (ADR 0144): a rolling
// upgrade on MariaDB. Without it nothing ran the version 3 routines under
// this code any more (the test server is MariaDB).
func TestConformanceMixedRoutines(t *testing.T) { runKitWith(t, false, true, false) }

// plantedEnv makes TestConformanceCatchesSkippedQuarantine's child run the
// kit on clients whose acquire procedure skips the epoch check.
const plantedEnv = "SIMBA_SQL_PLANTED_NO_QUARANTINE"

// TestConformanceCatchesSkippedQuarantine: the kit's data-loss case fails
// on a backend whose acquire procedure grants without checking the epoch
// row and markers (ADR 0130's rule, planted out).
func TestConformanceCatchesSkippedQuarantine(t *testing.T) {
	if os.Getenv(plantedEnv) == "" {
		sqltest.KitFails(t, plantedEnv, "TokensSurviveDataLoss")
		return
	}
	runKit(t, true)
}

// runKit runs the conformance kit; planted replaces each namespace's
// acquire procedure by one without the quarantine (once per namespace).
func runKit(t *testing.T, planted bool) { runKitWith(t, planted, false, false) }

// runKitWith is runKit; mixed makes every second client call the version 3
// routines (mysqlsimba.CallVersion3Routines); notifier makes every client a
// Notifier.
func runKitWith(t *testing.T, planted, mixed, notifier bool) {
	const lease = 2 * time.Second
	// The lock-delay subtests (ADR 0251, 0252): a delay on the database's
	// clock from the session's expiry; the quarantine is lease + delay.
	const maxLockDelay = 1500 * time.Millisecond
	db := newDB(t, dsn(t), nil)
	var mu sync.Mutex
	prefixes := map[string]bool{}
	clients := 0
	t.Cleanup(func() {
		for p := range prefixes {
			dropSchema(t, db, p)
		}
	})
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			mu.Lock()
			defer mu.Unlock()
			seen := prefixes[namespace]
			prefixes[namespace] = true
			opts := []mysqlsimba.Option{mysqlsimba.WithNamespace(namespace), mysqlsimba.WithMaxLease(lease), mysqlsimba.WithMaxLockDelay(maxLockDelay)}
			var b *mysqlsimba.Backend
			var nb *mysqlsimba.Notifier
			var err error
			if notifier {
				if nb, err = mysqlsimba.NewNotifier(t.Context(), db, opts...); err == nil {
					b = nb.Backend
				}
			} else {
				b, err = mysqlsimba.New(t.Context(), db, opts...)
			}
			if err != nil {
				t.Fatalf("mysqlsimba.New(%q): %v", namespace, err)
			}
			if planted && !seen {
				stmts, err := mysqlsimba.AcquireWithoutQuarantine(namespace)
				for _, s := range stmts {
					if err == nil {
						_, err = db.ExecContext(t.Context(), s)
					}
				}
				if err != nil {
					t.Fatalf("planting the bug: %v", err)
				}
			}
			if nb != nil {
				t.Cleanup(func() { _ = nb.Shutdown(context.Background()) })
				return nb
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			if clients++; mixed && clients%2 == 0 {
				// The first call detects the server; then switch.
				if _, err := b.Inspect(t.Context(), driver.InspectRequest{Names: []string{"x"}}); err != nil {
					t.Fatalf("first call: %v", err)
				}
				mysqlsimba.CallVersion3Routines(b)
			}
			return b
		},
		Lease: lease,
		// The cap, and so the quarantine after a loss (ADR 0130, 0135).
		MaxLease:     lease,
		MaxLockDelay: maxLockDelay,
		Polls:        !notifier, // a Backend's candidates poll; a Notifier's hear of releases
		// Data loss on SQL: the tables emptied. The quarantine follows,
		// then tokens keep rising.
		LoseData: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for p := range prefixes {
				for _, tbl := range []string{"_sessions", "_leases", "_epoch"} {
					if _, err := db.ExecContext(t.Context(), "TRUNCATE TABLE "+p+tbl); err != nil {
						t.Fatalf("truncate %s%s: %v", p, tbl, err)
					}
				}
			}
		},
	})
}
