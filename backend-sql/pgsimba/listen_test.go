package pgsimba_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

// The LISTEN connection comes from the pool, so the pool's BeforeConnect
// hook (where rotated passwords and IAM tokens come from) applies to it. A
// listener dialled from the pool's ConnConfig skipped it.
func TestListenerConnectionFromPool(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	app := "simba-hook-" + sqltest.FreshPrefix()
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.RuntimeParams["application_name"] = app
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := newBackend(t, pool, "")
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	admin := newPool(t, pgURL(t), nil)
	var n int
	if err := admin.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d LISTEN connections made by the pool's BeforeConnect, want 1", n)
	}
}

// records is a slog handler that keeps messages.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// A listener that loses its connection says so, once, and says when it is
// back: candidates poll meanwhile, which an operator must be able to see.
// Before, its failures were swallowed.
func TestFailingListenerIsLogged(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	newBackend(t, pool, prefix)
	var rec records
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithLogger(slog.New(&rec)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	channel, _ := pgsimba.Channel(prefix)
	var killed int
	if err := pool.QueryRow(ctxT(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = $1`, `LISTEN "`+channel+`"`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminating the listener: %d terminated, %v", killed, err)
	}
	next(t, ch, "empty notice once LISTEN is up again", func(n driver.Notice) bool { return n.Name == "" })
	// Both are logged before the empty notice is delivered.
	if !rec.has("WARN pgsimba: release notices lost") || !rec.has("INFO pgsimba: release notices subscribed again") {
		t.Errorf("log records %q, want a warning that notices were lost and a note that they are back", rec.msgs)
	}
}

// A pool whose connections the server ends when idle (idle_session_timeout,
// often set on a role) does not end the LISTEN connection, which is idle
// by nature: it waits for notices. Before, the server ended it every
// timeout; each time a warning and an info line were logged, notices sent
// meanwhile were lost, and every subscriber was woken to try everything.
func TestListenerOutlivesIdleSessionTimeout(t *testing.T) {
	pool := poolWith(t, map[string]string{"idle_session_timeout": "200ms"}, 0)
	var rec records
	prefix := sqltest.FreshPrefix()
	newBackend(t, pool, prefix)
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithLogger(slog.New(&rec)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	ch, _ := subscribe(t, b)
	next(t, ch, "empty notice once LISTEN is up", func(n driver.Notice) bool { return n.Name == "" })
	time.Sleep(time.Second) // five of the server's idle timeouts
	if rec.has("release notices lost") {
		t.Errorf("log records %q: the server ended the idle LISTEN connection", rec.msgs)
	}
	holder := open(t, b, 10*time.Second)
	tok := acquireWaited(t, b, holder, "x")
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: holder, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "the release notice of x", func(n driver.Notice) bool { return n.Name == "x" })
}
