package mysqlsimba_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const envDSN = "SIMBA_MYSQL_DSN"

func dsn(t testing.TB) string {
	t.Helper()
	d := os.Getenv(envDSN)
	if d == "" {
		t.Fatalf("%s is not set: these tests need a MySQL or MariaDB server (run `make services` and source .services/env)", envDSN)
	}
	return d
}

// newDB returns a handle on SIMBA_MYSQL_DSN, closed when t ends. If counter
// is not nil, every connection's traffic is counted into it.
func newDB(t testing.TB, dsnText string, counter *sqltest.WireCounter) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsnText)
	if err != nil {
		t.Fatalf("ParseDSN: %v", err)
	}
	if counter != nil {
		cfg.DialFunc = counter.Dialer()
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("NewConnector: %v", err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

func newBackend(t testing.TB, db *sql.DB, prefix string) *mysqlsimba.Backend {
	t.Helper()
	if prefix == "" {
		prefix = sqltest.FreshPrefix()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mysqlsimba.New(ctx, db, mysqlsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		dropSchema(t, db, prefix)
	})
	return b
}

// dropSchema removes a test namespace; prefix comes from freshPrefix or
// the kit, both valid prefixes.
func dropSchema(t testing.TB, db *sql.DB, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"open_v1", "open_v2", "open_v3", "renew_v1", "renew_v2", "acquire_v1", "acquire_v2", "acquire_v3", "lost_v1", "release_v1", "release_v2", "release_v3", "close_v1", "close_v2",
		"open_v4", "acquire_v4", "acquire_v5", "release_v4", "release_v5", "close_v3"} {
		if _, err := db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS "+prefix+"_"+s); err != nil {
			t.Errorf("drop %s_%s: %v", prefix, s, err)
		}
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+prefix+"_sessions, "+prefix+"_leases, "+prefix+"_schema, "+prefix+"_epoch, "+prefix+"_marks"); err != nil {
		t.Errorf("drop tables %s: %v", prefix, err)
	}
}

func ctxT(t testing.TB) context.Context { return sqltest.Ctx(t) }

func harness(t *testing.T) sqltest.Harness {
	d := dsn(t)
	db := newDB(t, d, nil)
	return sqltest.Harness{
		New: func(ctx context.Context, prefix string) (driver.Backend, func(), error) {
			b, err := mysqlsimba.New(ctx, db, mysqlsimba.WithNamespace(prefix))
			if err != nil {
				return nil, nil, err
			}
			return b, func() { _ = b.Shutdown(context.Background()) }, nil
		},
		NewCounted: func(t testing.TB, w *sqltest.WireCounter) driver.Backend {
			cdb := newDB(t, d, w)
			cdb.SetMaxOpenConns(1)
			return newBackend(t, cdb, "")
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, db, prefix) },
		// go-sql-driver/mysql never tells the server about a call whose
		// context ended: it closes the connection, and the server goes on
		// with the statement. So any client is a cut-off one.
		NewCutOff: func(t *testing.T, prefix string) driver.Backend { return newBackend(t, newDB(t, d, nil), prefix) },
		Busy: func(t *testing.T, prefix string) int {
			var n int
			err := db.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND LOCATE(?, INFO) > 0`, prefix+"_").Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		LockSession: func(t *testing.T, prefix string, id driver.ID) func() {
			tx, err := db.BeginTx(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctxT(t), "SELECT 1 FROM "+prefix+"_sessions WHERE id = ? FOR UPDATE", string(id)); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := tx.Rollback(); err != nil {
					t.Error(err)
				}
			}
		},
	}
}

func engine(t *testing.T) sqltest.Engine {
	d := dsn(t)
	admin := newDB(t, d, nil)
	h := harness(t)
	return sqltest.Engine{
		NewTracked: func(t *testing.T) (driver.Backend, string, func(*testing.T) int) {
			var pt sqltest.PortTracker
			cfg, err := mysql.ParseDSN(d)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DialFunc = pt.Dialer()
			conn, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { db.Close() })
			prefix := sqltest.FreshPrefix()
			b := newBackend(t, db, prefix)
			return b, prefix, func(t *testing.T) int {
				rows, err := admin.QueryContext(ctxT(t), "SELECT ID, HOST FROM information_schema.PROCESSLIST")
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]bool{}
				for _, p := range pt.Ports() {
					want[fmt.Sprintf("127.0.0.1:%d", p)] = true
				}
				var ids []int64
				for rows.Next() {
					var id int64
					var host string
					if err := rows.Scan(&id, &host); err != nil {
						t.Fatal(err)
					}
					if want[host] {
						ids = append(ids, id)
					}
				}
				rows.Close()
				for _, id := range ids {
					// KILL takes no bind parameter; id is an integer the
					// server gave us.
					if _, err := admin.ExecContext(ctxT(t), fmt.Sprintf("KILL %d", id)); err != nil {
						t.Fatalf("KILL %d: %v", id, err)
					}
				}
				return len(ids)
			}
		},
		LockSession: h.LockSession,
		NewOnRestartable: func(t *testing.T) driver.Backend {
			rd := os.Getenv("SIMBA_MYSQL_RESTART_DSN")
			if rd == "" {
				t.Fatal("SIMBA_MYSQL_RESTART_DSN is not set: the restart test needs the private server that `make services` starts")
			}
			return newBackend(t, newDB(t, rd, nil), "")
		},
		CtlEnv: "SIMBA_MYSQL_RESTART_CTL",
		NewLossPair: func(t *testing.T, maxLease time.Duration) (driver.Backend, driver.Backend, func(*testing.T)) {
			rd := os.Getenv("SIMBA_MYSQL_RESTART_DSN")
			if rd == "" {
				t.Fatal("SIMBA_MYSQL_RESTART_DSN is not set: the data-loss engine test needs the private server that `make services` starts")
			}
			db := newDB(t, rd, nil)
			prefix := sqltest.FreshPrefix()
			var bs [2]driver.Backend
			for i := range bs {
				b, err := mysqlsimba.New(ctxT(t), newDB(t, rd, nil), mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(maxLease))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
				bs[i] = b
			}
			t.Cleanup(func() { dropSchema(t, db, prefix) })
			return bs[0], bs[1], func(t *testing.T) {
				for _, tbl := range []string{"_sessions", "_leases", "_epoch"} {
					if _, err := db.ExecContext(ctxT(t), "TRUNCATE TABLE "+prefix+tbl); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
	}
}
