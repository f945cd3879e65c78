package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/fence"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: these tests need the database server (run `make services` and source .services/env)", name)
	}
	return v
}

// store is one way of writing to the user's database: begin a transaction,
// guard it, write, and commit or roll back.
type store struct {
	name    string
	backend func(t *testing.T, prefix string) driver.Backend
	fences  *fence.Table
	// write runs guard + write in one transaction, committing on success.
	write func(ctx context.Context, name string, token uint64, owner string) error
	// hold runs the guard in a transaction that stays open until release.
	hold func(ctx context.Context, name string, token uint64) (release func(commit bool) error, err error)
	// owner reads the guarded row.
	owner func(ctx context.Context) string
}

func pgStore(t *testing.T, viaSQL bool) store {
	pool, err := pgxpool.New(context.Background(), env(t, "SIMBA_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	prefix := sqltest.FreshPrefix()
	ft, err := fence.New(prefix, fence.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	ctx := sqltest.Ctx(t)
	if err := ft.CreatePgx(ctx, pool); err != nil {
		t.Fatal(err)
	}
	accounts := prefix + "_accounts"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id int PRIMARY KEY, owner text NOT NULL); INSERT INTO "+accounts+" VALUES (1, 'nobody')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+accounts+", "+prefix+"_fence")
	})
	s := store{name: "pgx", fences: ft,
		backend: func(t *testing.T, p string) driver.Backend {
			b, err := pgsimba.New(sqltest.Ctx(t), pool, pgsimba.WithNamespace(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = b.Shutdown(context.Background())
				_, _ = pool.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+p+"_open_v1, "+p+"_renew_v1, "+p+"_acquire_v1, "+p+"_release_v1, "+p+"_close_v1; DROP TABLE IF EXISTS "+p+"_sessions, "+p+"_leases")
			})
			return b
		},
		owner: func(ctx context.Context) string {
			var o string
			_ = pool.QueryRow(ctx, "SELECT owner FROM "+accounts+" WHERE id = 1").Scan(&o)
			return o
		},
	}
	if !viaSQL {
		s.write = func(ctx context.Context, name string, token uint64, owner string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := ft.GuardPgx(ctx, tx, name, token); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "UPDATE "+accounts+" SET owner = $1 WHERE id = 1", owner)
				return err
			})
		}
		s.hold = func(ctx context.Context, name string, token uint64) (func(bool) error, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			if err := ft.GuardPgx(ctx, tx, name, token); err != nil {
				_ = tx.Rollback(ctx)
				return nil, err
			}
			return func(commit bool) error {
				if commit {
					return tx.Commit(ctx)
				}
				return tx.Rollback(ctx)
			}, nil
		}
		return s
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	s.name = "database/sql on PostgreSQL"
	s.write, s.hold = sqlWriters(db, ft, "UPDATE "+accounts+" SET owner = $1 WHERE id = 1")
	return s
}

func mysqlStore(t *testing.T) store {
	cfg, err := mysql.ParseDSN(env(t, "SIMBA_MYSQL_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	prefix := sqltest.FreshPrefix()
	ft, err := fence.New(prefix, fence.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := sqltest.Ctx(t)
	if err := ft.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	accounts := prefix + "_accounts"
	for _, q := range []string{"CREATE TABLE " + accounts + " (id int PRIMARY KEY, owner varchar(20) NOT NULL)", "INSERT INTO " + accounts + " VALUES (1, 'nobody')"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+accounts+", "+prefix+"_fence")
	})
	s := store{name: "database/sql on MariaDB", fences: ft,
		backend: func(t *testing.T, p string) driver.Backend {
			b, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = b.Shutdown(context.Background())
				for _, r := range []string{"open_v1", "renew_v1", "acquire_v1", "release_v1", "close_v1"} {
					_, _ = db.ExecContext(context.Background(), "DROP PROCEDURE IF EXISTS "+p+"_"+r)
				}
				_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+p+"_sessions, "+p+"_leases")
			})
			return b
		},
		owner: func(ctx context.Context) string {
			var o string
			_ = db.QueryRowContext(ctx, "SELECT owner FROM "+accounts+" WHERE id = 1").Scan(&o)
			return o
		},
	}
	s.write, s.hold = sqlWriters(db, ft, "UPDATE "+accounts+" SET owner = ? WHERE id = 1")
	return s
}

func sqlWriters(db *sql.DB, ft *fence.Table, update string) (
	func(ctx context.Context, name string, token uint64, owner string) error,
	func(ctx context.Context, name string, token uint64) (func(bool) error, error),
) {
	write := func(ctx context.Context, name string, token uint64, owner string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := ft.Guard(ctx, tx, name, token); err != nil {
			_ = tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, update, owner); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	hold := func(ctx context.Context, name string, token uint64) (func(bool) error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if err := ft.Guard(ctx, tx, name, token); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		return func(commit bool) error {
			if commit {
				return tx.Commit()
			}
			return tx.Rollback()
		}, nil
	}
	return write, hold
}

func stores(t *testing.T) []func(t *testing.T) store {
	return []func(t *testing.T) store{
		func(t *testing.T) store { return pgStore(t, false) },
		func(t *testing.T) store { return pgStore(t, true) },
		mysqlStore,
	}
}

// The old leader's term ends while it is paused (its session expires on
// the database); the new leader wins a higher token and writes; the old
// leader wakes and writes late: the guard refuses, the new write stands.
func TestPausedLeadersLateWriteRefused(t *testing.T) {
	for _, mk := range stores(t) {
		s := mk(t)
		t.Run(s.name, func(t *testing.T) {
			ctx := sqltest.Ctx(t)
			b := s.backend(t, sqltest.FreshPrefix())
			const lease = 300 * time.Millisecond
			old := sqltest.Open(t, b, lease)
			oldToken := sqltest.Acquire(t, b, old, "ledger")
			if err := s.write(ctx, "ledger", oldToken, "old"); err != nil {
				t.Fatalf("old leader's write during its term: %v", err)
			}
			<-time.After(2 * lease) // the old leader is paused; its session expires
			newer := sqltest.Open(t, b, 10*time.Second)
			newToken := sqltest.Acquire(t, b, newer, "ledger")
			if newToken <= oldToken {
				t.Fatalf("new token %d, want > %d", newToken, oldToken)
			}
			if err := s.write(ctx, "ledger", newToken, "new"); err != nil {
				t.Fatalf("new leader's write: %v", err)
			}
			if err := s.write(ctx, "ledger", newToken, "new"); err != nil {
				t.Fatalf("new leader's second write with the same token: %v", err)
			}
			err := s.write(ctx, "ledger", oldToken, "old-late")
			if !errors.Is(err, fence.ErrStale) {
				t.Fatalf("late write of the old leader = %v, want ErrStale", err)
			}
			if got := s.owner(ctx); got != "new" {
				t.Fatalf("owner = %q after the late write, want %q", got, "new")
			}
		})
	}
}

// The new leader's guard holds the row; the old leader's concurrent guard
// waits for it and, once the new leader commits, is refused.
func TestConcurrentLowerTokenRefused(t *testing.T) {
	for _, mk := range stores(t) {
		s := mk(t)
		t.Run(s.name, func(t *testing.T) {
			ctx := sqltest.Ctx(t)
			release, err := s.hold(ctx, "n", 20)
			if err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() { res <- s.write(ctx, "n", 10, "old") }()
			if err := release(true); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-res:
				if !errors.Is(err, fence.ErrStale) {
					t.Fatalf("lower token after a higher one committed = %v, want ErrStale", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the lower token's guard did not return")
			}
			// A rolled-back guard records nothing.
			release, err = s.hold(ctx, "m", 50)
			if err != nil {
				t.Fatal(err)
			}
			if err := release(false); err != nil {
				t.Fatal(err)
			}
			if err := s.write(ctx, "m", 40, "x"); err != nil {
				t.Fatalf("after a rolled-back guard of 50, token 40 = %v, want nil", err)
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	if _, err := fence.New("Bad", fence.Postgres); !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
		t.Errorf("New(Bad) = %v, want ErrInvalidPrefix", err)
	}
	if _, err := fence.New("ok", fence.Dialect(9)); err == nil {
		t.Error("New with an unknown dialect succeeded")
	}
	ft, err := fence.New("app", fence.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	if err := ft.GuardPgx(context.Background(), nil, "a", 1); err == nil {
		t.Error("GuardPgx on a MySQL table succeeded")
	}
	if err := ft.Guard(context.Background(), nil, "a b", 1); !errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("Guard(invalid name) = %v, want ErrInvalidName", err)
	}
	if err := ft.Guard(context.Background(), nil, "a", 0); err == nil {
		t.Error("Guard(token 0) succeeded")
	}
	if err := ft.Guard(context.Background(), nil, "a", 1<<63); err == nil {
		t.Error("Guard(token 2^63) succeeded")
	}
}
