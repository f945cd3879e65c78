package pgsimba_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const envURL = "SIMBA_POSTGRES_URL"

func pgURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(envURL)
	if u == "" {
		t.Fatalf("%s is not set: these tests need a PostgreSQL server (run `make services` and source .services/env)", envURL)
	}
	return u
}

// newPool returns a pool on url, closed when t ends. If counter is not
// nil, every connection's traffic is counted into it.
func newPool(t testing.TB, url string, counter *sqltest.WireCounter) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if counter != nil {
		cfg.ConnConfig.DialFunc = counter.Dialer()
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newBackend returns a backend in a fresh namespace (or prefix if given)
// whose tables and routines are dropped when t ends.
func newBackend(t testing.TB, pool *pgxpool.Pool, prefix string) *pgsimba.Backend {
	t.Helper()
	if prefix == "" {
		prefix = sqltest.FreshPrefix()
	}
	b, err := pgsimba.New(sqltest.Ctx(t), pool, pgsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		dropSchema(t, pool, prefix)
	})
	return b
}

// dropSchema removes a test namespace; prefix comes from FreshPrefix or
// the kit, both valid prefixes.
func dropSchema(t testing.TB, pool *pgxpool.Pool, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := pool.Exec(ctx, `
DROP FUNCTION IF EXISTS `+prefix+`_acquire_v4, `+prefix+`_open_v4, `+prefix+`_renew_v3, `+prefix+`_acquire_v3, `+prefix+`_epoch_v2,
    `+prefix+`_open_v1, `+prefix+`_open_v2, `+prefix+`_open_v3, `+prefix+`_renew_v1, `+prefix+`_renew_v2,
    `+prefix+`_acquire_v1, `+prefix+`_acquire_v2, `+prefix+`_epoch_v1, `+prefix+`_release_v1, `+prefix+`_release_v2, `+prefix+`_close_v1, `+prefix+`_close_v2, `+prefix+`_release_v3, `+prefix+`_close_v3,
    `+prefix+`_open_v5, `+prefix+`_acquire_v5, `+prefix+`_epoch_v3, `+prefix+`_release_v4, `+prefix+`_close_v4;
DROP TABLE IF EXISTS `+prefix+`_sessions, `+prefix+`_leases, `+prefix+`_schema, `+prefix+`_epoch, `+prefix+`_marks;
DROP FUNCTION IF EXISTS `+prefix+`_refuse_v1;`)
	if err != nil {
		t.Errorf("drop schema %s: %v", prefix, err)
	}
}

func open(t testing.TB, b driver.Backend, lease time.Duration) driver.ID {
	t.Helper()
	return sqltest.Open(t, b, lease)
}

func acquire(t testing.TB, b driver.Backend, id driver.ID, name string) uint64 {
	t.Helper()
	return sqltest.Acquire(t, b, id, name)
}

// waitFor has a new session of b be refused each name, as a waiting
// candidate is, so that the names' next release or close notifies (ADR
// 0162: a release notifies only names an acquire was refused).
func waitFor(t testing.TB, b driver.Backend, names ...string) {
	t.Helper()
	w := open(t, b, 10*time.Second)
	for _, n := range names {
		if tok := acquire(t, b, w, n); tok != 0 {
			t.Fatalf("the waiter took %q (token %d), want a refusal", n, tok)
		}
	}
}

// acquireWaited acquires name for id and has another session be refused
// it, for a release that notifies; it returns the token.
func acquireWaited(t testing.TB, b driver.Backend, id driver.ID, name string) uint64 {
	t.Helper()
	tok := acquire(t, b, id, name)
	waitFor(t, b, name)
	return tok
}

func ctxT(t testing.TB) context.Context { return sqltest.Ctx(t) }

func harness(t *testing.T) sqltest.Harness {
	url := pgURL(t)
	pool := newPool(t, url, nil)
	return sqltest.Harness{
		New: func(ctx context.Context, prefix string) (driver.Backend, func(), error) {
			b, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(prefix))
			if err != nil {
				return nil, nil, err
			}
			return b, func() { _ = b.Shutdown(context.Background()) }, nil
		},
		NewCounted: func(t testing.TB, w *sqltest.WireCounter) driver.Backend {
			return newBackend(t, newPool(t, url+"&pool_max_conns=1", w), "")
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, pool, prefix) },
		NewCutOff: func(t *testing.T, prefix string) driver.Backend {
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			// At a call's deadline the client closes its connection and
			// its cancel request never arrives, as for a client cut off
			// from the server: pgx sends no cancel from the deadline
			// itself, and the one it sends when it closes the broken
			// connection needs a second connection, which fails. (One
			// pooled connection, so the second dial is that one.)
			cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
			}
			cfg.MaxConns = 1
			var dials atomic.Int32
			d := &net.Dialer{}
			cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) == 2 {
					return nil, errors.New("cut off: the cancel request does not reach the server")
				}
				return d.DialContext(ctx, network, addr)
			}
			p, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			return newBackend(t, p, prefix)
		},
		Busy: func(t *testing.T, prefix string) int {
			var n int
			err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
				WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, prefix+"_").Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		LockSession: func(t *testing.T, prefix string, id driver.ID) func() {
			tx, err := pool.Begin(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctxT(t), "SELECT 1 FROM "+prefix+"_sessions WHERE id = $1 FOR UPDATE", string(id)); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := tx.Rollback(context.Background()); err != nil {
					t.Error(err)
				}
			}
		},
	}
}

func engine(t *testing.T) sqltest.Engine {
	url := pgURL(t)
	admin := newPool(t, url, nil)
	h := harness(t)
	return sqltest.Engine{
		NewTracked: func(t *testing.T) (driver.Backend, string, func(*testing.T) int) {
			var pt sqltest.PortTracker
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DialFunc = pt.Dialer()
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			prefix := sqltest.FreshPrefix()
			b := newBackend(t, pool, prefix)
			return b, prefix, func(t *testing.T) int {
				var n int
				err := admin.QueryRow(ctxT(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE client_addr = '127.0.0.1' AND client_port = ANY($1)`, pt.Ports()).Scan(&n)
				if err != nil {
					t.Fatalf("pg_terminate_backend: %v", err)
				}
				return n
			}
		},
		LockSession: h.LockSession,
		NewOnRestartable: func(t *testing.T) driver.Backend {
			u := os.Getenv("SIMBA_POSTGRES_RESTART_URL")
			if u == "" {
				t.Fatal("SIMBA_POSTGRES_RESTART_URL is not set: the restart test needs the private server that `make services` starts")
			}
			return newBackend(t, newPool(t, u, nil), "")
		},
		CtlEnv: "SIMBA_POSTGRES_RESTART_CTL",
		NewLossPair: func(t *testing.T, maxLease time.Duration) (driver.Backend, driver.Backend, func(*testing.T)) {
			u := os.Getenv("SIMBA_POSTGRES_RESTART_URL")
			if u == "" {
				t.Fatal("SIMBA_POSTGRES_RESTART_URL is not set: the data-loss engine test needs the private server that `make services` starts")
			}
			pool := newPool(t, u, nil)
			prefix := sqltest.FreshPrefix()
			var bs [2]driver.Backend
			for i := range bs {
				b, err := pgsimba.New(ctxT(t), newPool(t, u, nil), pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(maxLease))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
				bs[i] = b
			}
			t.Cleanup(func() { dropSchema(t, pool, prefix) })
			return bs[0], bs[1], func(t *testing.T) {
				for _, tbl := range []string{"_sessions", "_leases", "_epoch"} {
					if _, err := pool.Exec(ctxT(t), "TRUNCATE TABLE "+prefix+tbl); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
	}
}

// newBackendNoDrop is another client of an existing namespace.
func newBackendNoDrop(t testing.TB, pool *pgxpool.Pool, prefix string) (*pgsimba.Backend, error) {
	b, err := pgsimba.New(sqltest.Ctx(t), pool, pgsimba.WithNamespace(prefix))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b, nil
}
