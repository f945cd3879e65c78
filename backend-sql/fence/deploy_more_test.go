package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/fence"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
)

// The rest of the fencing table's deployment matrix (issue 21): MariaDB's
// isolation levels and sql_mode=ANSI, a read-only transaction on both
// servers, and an application's own table of the fencing table's name.

// mariaDB opens the MariaDB test database with the session variables vars
// set on every connection.
func mariaDB(t *testing.T, vars map[string]string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(env(t, "SIMBA_MYSQL_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range vars {
		cfg.Params[k] = v
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mariaFence creates a fencing table of a fresh prefix through db.
func mariaFence(t *testing.T, db *sql.DB) (*fence.Table, string) {
	t.Helper()
	prefix := sqltest.FreshPrefix()
	ft, err := fence.New(prefix, fence.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
	if err := ft.Create(sqltest.Ctx(t), db); err != nil {
		t.Fatal(err)
	}
	return ft, prefix
}

// guardTx runs the guard alone in a transaction of db and commits.
func guardTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, ft *fence.Table, name string, token uint64) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := ft.Guard(ctx, tx, name, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// TestFenceMariaDBIsolationLevels: at each isolation level, a transaction
// whose snapshot predates a newer token is refused (the guard's upsert and
// its locking read see the latest commit, not the snapshot), and a higher
// token passes.
func TestFenceMariaDBIsolationLevels(t *testing.T) {
	db := mariaDB(t, nil)
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(strings.ReplaceAll(level.String(), " ", "_"), func(t *testing.T) {
			ctx := sqltest.Ctx(t)
			ft, prefix := mariaFence(t, db)
			aux := prefix + "_aux"
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+aux+" (id int PRIMARY KEY) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+aux) })
			opts := &sql.TxOptions{Isolation: level}
			if err := guardTx(ctx, db, opts, ft, "x", 10); err != nil {
				t.Fatal(err)
			}
			stale, err := db.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stale.Rollback() }()
			// The snapshot is taken at the first read, before 11 (of
			// another table: under SERIALIZABLE a read of the fencing
			// table would lock its rows and make 11 wait for this one).
			var n int
			if err := stale.QueryRowContext(ctx, "SELECT count(*) FROM "+aux).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if err := guardTx(ctx, db, opts, ft, "x", 11); err != nil {
				t.Fatal(err)
			}
			if err := ft.Guard(ctx, stale, "x", 10); !errors.Is(err, fence.ErrStale) {
				t.Errorf("token 10 after 11, in a transaction whose snapshot predates 11 = %v, want ErrStale", err)
			}
			_ = stale.Rollback() // its row lock would hold 12 back
			if err := guardTx(ctx, db, opts, ft, "x", 12); err != nil {
				t.Errorf("token 12 after 11 = %v, want nil", err)
			}
		})
	}
}

// TestFenceMariaDBSQLModeANSI: the table is created and the guard works
// under sql_mode=ANSI (ANSI_QUOTES, PIPES_AS_CONCAT, ...).
func TestFenceMariaDBSQLModeANSI(t *testing.T) {
	db := mariaDB(t, map[string]string{"sql_mode": "'ANSI'"})
	ctx := sqltest.Ctx(t)
	var mode string
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil || !strings.Contains(mode, "ANSI_QUOTES") {
		t.Fatalf("sql_mode = %q, %v; want ANSI", mode, err)
	}
	ft, _ := mariaFence(t, db)
	if err := guardTx(ctx, db, nil, ft, "x", 10); err != nil {
		t.Fatal(err)
	}
	if err := guardTx(ctx, db, nil, ft, "x", 9); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 9 after 10 under sql_mode=ANSI = %v, want ErrStale", err)
	}
}

// TestFenceReadOnlyTransaction: in a read-only transaction the guard
// fails with the server's error, neither passing nor reporting ErrStale
// (the writer's term is not over; its transaction cannot write).
func TestFenceReadOnlyTransaction(t *testing.T) {
	ctx := sqltest.Ctx(t)
	t.Run("MariaDB_tx_read_only", func(t *testing.T) {
		ft, _ := mariaFence(t, mariaDB(t, nil))
		ro := mariaDB(t, map[string]string{"tx_read_only": "1"})
		err := guardTx(ctx, ro, nil, ft, "x", 10)
		if err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("guard in a read-only transaction = %v, want the server's refusal", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("PostgreSQL_default_transaction_read_only", func(t *testing.T) {
		admin := fencePool(t, nil)
		prefix := sqltest.FreshPrefix()
		ft, err := fence.New(prefix, fence.Postgres)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
		if err := ft.CreatePgx(ctx, admin); err != nil {
			t.Fatal(err)
		}
		ro := fencePool(t, map[string]string{"default_transaction_read_only": "on"})
		err = guardIn(ctx, ro, ft, "x", 10)
		if err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("guard in a read-only transaction = %v, want the server's refusal", err)
		}
		t.Logf("refused: %v", err)
	})
}

// TestFenceForeignTable: an application's own table named <prefix>_fence
// of another shape is refused at Create with ErrForeignTable naming it,
// and nothing is written to it. A lookalike (name, token as text) would
// otherwise compare tokens as text: on MariaDB token 9 passed after 10.
func TestFenceForeignTable(t *testing.T) {
	ctx := sqltest.Ctx(t)
	shapes := []string{
		"id int PRIMARY KEY, label varchar(20)",
		"name varchar(128) PRIMARY KEY, token varchar(20) NOT NULL", // the lookalike
		"name varchar(128) PRIMARY KEY, token bigint NOT NULL, note varchar(20)",
		"name varchar(128) NOT NULL, token bigint NOT NULL", // no primary key: no upsert conflict
	}
	for i, shape := range shapes {
		t.Run(fmt.Sprintf("MariaDB_%d", i), func(t *testing.T) {
			db := mariaDB(t, nil)
			prefix := sqltest.FreshPrefix()
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+prefix+"_fence ("+shape+")"); err != nil {
				t.Fatal(err)
			}
			ft, err := fence.New(prefix, fence.MySQL)
			if err != nil {
				t.Fatal(err)
			}
			if err := ft.Create(ctx, db); !errors.Is(err, sqlbackend.ErrForeignTable) || !strings.Contains(err.Error(), prefix+"_fence") {
				t.Fatalf("Create on a foreign table (%s) = %v, want ErrForeignTable naming it", shape, err)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+prefix+"_fence").Scan(&n); err != nil || n != 0 {
				t.Fatalf("the foreign table has %d rows (%v), want 0: nothing written", n, err)
			}
		})
		t.Run(fmt.Sprintf("PostgreSQL_%d", i), func(t *testing.T) {
			admin := fencePool(t, nil)
			prefix := sqltest.FreshPrefix()
			t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
			if _, err := admin.Exec(ctx, "CREATE TABLE "+prefix+"_fence ("+shape+")"); err != nil {
				t.Fatal(err)
			}
			ft, err := fence.New(prefix, fence.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			if err := ft.CreatePgx(ctx, admin); !errors.Is(err, sqlbackend.ErrForeignTable) || !strings.Contains(err.Error(), prefix+"_fence") {
				t.Fatalf("Create on a foreign table (%s) = %v, want ErrForeignTable naming it", shape, err)
			}
		})
	}
	// A view of the name is not a table either.
	t.Run("PostgreSQL_view", func(t *testing.T) {
		admin := fencePool(t, nil)
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP VIEW IF EXISTS "+prefix+"_fence") })
		if _, err := admin.Exec(ctx, "CREATE VIEW "+prefix+"_fence AS SELECT 'x'::text AS name, 1::bigint AS token"); err != nil {
			t.Fatal(err)
		}
		ft, err := fence.New(prefix, fence.Postgres)
		if err != nil {
			t.Fatal(err)
		}
		if err := ft.CreatePgx(ctx, admin); !errors.Is(err, sqlbackend.ErrForeignTable) {
			t.Fatalf("Create on a view of the name = %v, want ErrForeignTable", err)
		}
	})
	// Simba's own table passes again (Create at every start).
	t.Run("own_table_again", func(t *testing.T) {
		db := mariaDB(t, nil)
		ft, _ := mariaFence(t, db)
		if err := ft.Create(ctx, db); err != nil {
			t.Fatalf("Create on its own table: %v", err)
		}
		admin := fencePool(t, nil)
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_fence") })
		pt, err := fence.New(prefix, fence.Postgres)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := pt.CreatePgx(ctx, admin); err != nil {
				t.Fatalf("CreatePgx on its own table: %v", err)
			}
		}
	})
}
