package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/fence"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
)

// The deployment matrix for the fencing table (issue 21): the search_path
// and the isolation level of the user's transaction.

func fencePool(t *testing.T, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(env(t, "SIMBA_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// guardIn runs the guard alone in a transaction of pool and commits.
func guardIn(ctx context.Context, pool *pgxpool.Pool, ft *fence.Table, name string, token uint64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ft.GuardPgx(ctx, tx, name, token) })
}

// TestFenceSearchPath: a second fencing table of the prefix in another
// schema is refused at Create (writers whose search_path differ would
// guard against two tables, a stale token passing on one); with InSchema
// the guard finds the one table whatever the transaction's search_path.
func TestFenceSearchPath(t *testing.T) {
	ctx := sqltest.Ctx(t)
	admin := fencePool(t, nil)
	other := "s_" + sqltest.FreshPrefix()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+other+" CASCADE") })
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS public."+prefix+"_fence") })
	plain, err := fence.New(prefix, fence.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.CreatePgx(ctx, admin); err != nil {
		t.Fatal(err)
	}
	foreign := fencePool(t, map[string]string{"search_path": other})
	if err := plain.CreatePgx(ctx, foreign); !errors.Is(err, sqlbackend.ErrSchemaConflict) || !strings.Contains(err.Error(), "public") {
		t.Errorf("Create through a search_path without public = %v, want ErrSchemaConflict naming public", err)
	}
	bound, err := fence.New(prefix, fence.Postgres, fence.InSchema("public"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bound.CreatePgx(ctx, foreign); err != nil {
		t.Fatalf("Create InSchema(public) through another search_path: %v", err)
	}
	if err := guardIn(ctx, admin, bound, "x", 10); err != nil {
		t.Fatal(err)
	}
	if err := guardIn(ctx, foreign, bound, "x", 9); !errors.Is(err, fence.ErrStale) {
		t.Errorf("a lower token through another search_path = %v, want ErrStale (one table)", err)
	}
	if _, err := fence.New(prefix, fence.Postgres, fence.InSchema(`x\`)); err == nil {
		t.Error("InSchema with a backslash accepted (it would escape a literal's quote under standard_conforming_strings off)")
	}
	if _, err := fence.New(prefix, fence.MySQL, fence.InSchema("x")); err == nil {
		t.Error("InSchema on MySQL accepted")
	}
}

// TestFenceIsolationLevels: at each isolation level a lower token is
// refused, and a higher one passes.
func TestFenceIsolationLevels(t *testing.T) {
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			ctx := sqltest.Ctx(t)
			pool := fencePool(t, map[string]string{"default_transaction_isolation": level})
			prefix := sqltest.FreshPrefix()
			ft, err := fence.New(prefix, fence.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			if err := ft.CreatePgx(ctx, pool); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
			if err := guardIn(ctx, pool, ft, "x", 10); err != nil {
				t.Fatal(err)
			}
			// The stale writer's transaction began before the newer one
			// committed: its snapshot does not see token 11.
			stale, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer stale.Rollback(context.Background())
			if _, err := stale.Exec(ctx, "SELECT count(*) FROM "+prefix+"_fence"); err != nil {
				t.Fatal(err)
			}
			if err := guardIn(ctx, pool, ft, "x", 11); err != nil {
				t.Fatal(err)
			}
			if err := ft.GuardPgx(ctx, stale, "x", 10); err == nil {
				t.Errorf("token 10 after 11 wrote, in a transaction whose snapshot predates 11: passed")
			}
		})
	}
}
