package pgsimba_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
)

// The migration to version 7 folds and deletes every released row of the
// namespace, in one transaction: on a namespace of many names it runs
// longer than a statement_timeout an operator sets on the role or the
// pool against runaway queries (30 s, 5 s), and it must complete all the
// same (its lock waits stay bounded by its own lock_timeout). Scaled
// down: 200,000 released rows and a 100 ms statement_timeout (found by
// review "revsql": New failed with 57014 at every start, so the
// namespace could never be upgraded under that setting; and a second
// process starting meanwhile waits for the first's migration).
func TestMigrationOutlastsStatementTimeout(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, pool, prefix) })
	ddl, err := pgsimba.SchemaAt(prefix, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctxT(t), "BEGIN; "+ddl+"; INSERT INTO "+prefix+"_epoch VALUES (1, clock_timestamp()); "+
		"INSERT INTO "+prefix+"_leases (name, session_id, token, held) SELECT 'order:' || g, NULL, g, false FROM generate_series(1, 200000) g; COMMIT"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "100ms"
	limited, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(limited.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Two processes start at once: one migrates, the other waits for it.
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			b, err := pgsimba.New(ctx, limited, pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(time.Second))
			if err == nil {
				err = b.Shutdown(context.Background())
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("New on a namespace of 200,000 released names under statement_timeout = 100ms: %v", err)
		}
	}
	var n int
	if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+prefix+"_leases").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the migration: %d, %v (want the marker only)", n, err)
	}
}
