package mysqlsimba_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// TestConformance runs the backend conformance kit against the real
// MariaDB/MySQL server. Each kit namespace is a table prefix; each client
// is its own Backend value.
func TestConformance(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	var mu sync.Mutex
	prefixes := map[string]bool{}
	t.Cleanup(func() {
		for p := range prefixes {
			dropSchema(t, db, p)
		}
	})
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			mu.Lock()
			prefixes[namespace] = true
			mu.Unlock()
			b, err := mysqlsimba.New(t.Context(), db, mysqlsimba.WithNamespace(namespace))
			if err != nil {
				t.Fatalf("mysqlsimba.New(%q): %v", namespace, err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b
		},
		Lease: 2 * time.Second,
		Polls: true, // MySQL has no LISTEN/NOTIFY: candidates poll
		// Data loss on SQL: the tables emptied. Tokens must keep rising.
		LoseData: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for p := range prefixes {
				for _, tbl := range []string{"_sessions", "_leases"} {
					if _, err := db.ExecContext(t.Context(), "TRUNCATE TABLE "+p+tbl); err != nil {
						t.Fatalf("truncate %s%s: %v", p, tbl, err)
					}
				}
			}
		},
	})
}
