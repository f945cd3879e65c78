package pgsimba_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// TestConformance runs the backend conformance kit against the real
// PostgreSQL server. Each kit namespace is a table prefix ("kt" + 8 hex
// digits is a valid one); each client is its own Backend value.
func TestConformance(t *testing.T) {
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
			b, err := pgsimba.New(t.Context(), pool, pgsimba.WithNamespace(namespace))
			if err != nil {
				t.Fatalf("pgsimba.New(%q): %v", namespace, err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b
		},
		Lease: 2 * time.Second,
		// Data loss on SQL: the tables emptied. Tokens must keep rising.
		LoseData: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for p := range prefixes {
				if _, err := pool.Exec(t.Context(), "TRUNCATE "+p+"_sessions, "+p+"_leases"); err != nil {
					t.Fatalf("truncate %s: %v", p, err)
				}
			}
		},
	})
}
