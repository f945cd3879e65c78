package pgsimba_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend-sql/pgsimba"
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

// newPool returns a pool on SIMBA_POSTGRES_URL, closed when t ends. If
// counter is not nil, every connection's traffic is counted into it.
func newPool(t testing.TB, url string, counter *wireCounter) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if counter != nil {
		d := &net.Dialer{}
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, w: counter}, nil
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// freshPrefix returns a table prefix no other test uses.
func freshPrefix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// newBackend returns a backend in a fresh namespace (or prefix if given)
// whose tables and routines are dropped when t ends.
func newBackend(t testing.TB, pool *pgxpool.Pool, prefix string) *pgsimba.Backend {
	t.Helper()
	if prefix == "" {
		prefix = freshPrefix()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgsimba.New(ctx, pool, pgsimba.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		b.Shutdown()
		dropSchema(t, pool, prefix)
	})
	return b
}

func dropSchema(t testing.TB, pool *pgxpool.Pool, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// prefix comes from freshPrefix or a constant of the test.
	_, err := pool.Exec(ctx, `
DROP FUNCTION IF EXISTS `+prefix+`_open_v1, `+prefix+`_renew_v1, `+prefix+`_acquire_v1, `+prefix+`_release_v1, `+prefix+`_close_v1;
DROP TABLE IF EXISTS `+prefix+`_sessions, `+prefix+`_leases;`)
	if err != nil {
		t.Errorf("drop schema %s: %v", prefix, err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wireCounter counts the traffic of the connections it wraps: bytes each
// way, and round trips (a write that follows a read starts a new one).
type wireCounter struct {
	sent, received, trips atomic.Int64
	lastWasRead           atomic.Bool
}

func (w *wireCounter) reset() {
	w.sent.Store(0)
	w.received.Store(0)
	w.trips.Store(0)
	w.lastWasRead.Store(true)
}

type countingConn struct {
	net.Conn
	w *wireCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.w.lastWasRead.Swap(false) {
		c.w.trips.Add(1)
	}
	n, err := c.Conn.Write(p)
	c.w.sent.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.lastWasRead.Store(true)
	}
	c.w.received.Add(int64(n))
	return n, err
}
