package fxsimba_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// These tests run fx.New(fx.Provide(fxsimba.Module), …) against the real
// servers of .services/env (scripts/services.sh): a missing variable fails
// the test, naming it.

func mustEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: start the test servers and source .services/env (scripts/services.sh)", name)
	}
	return v
}

// postgresBackend is the pattern for an fx application on PostgreSQL: the
// constructor does no I/O (pgxpool connects lazily; WithoutSchemaCreation
// keeps pgsimba.New off the database) and the schema is created by a start
// hook, bounded by fx's start timeout. The hook is appended before
// Module's (Module takes the backend, so fx builds the backend first), so
// the schema exists before Module's start waits for the session.
func postgresBackend(url, prefix string) fx.Option {
	return fx.Provide(func(lc fx.Lifecycle) (session.Backend, error) {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			return nil, err
		}
		b, err := pgsimba.New(context.Background(), pool, pgsimba.WithNamespace(prefix), pgsimba.WithoutSchemaCreation())
		if err != nil {
			pool.Close()
			return nil, err
		}
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error {
				// A second New on the pool creates the schema if missing (safe
				// when many processes start at once); it holds no resource.
				_, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(prefix))
				return err
			},
			OnStop: func(ctx context.Context) error {
				defer pool.Close()
				return b.Shutdown(ctx)
			},
		})
		return b, nil
	})
}

// redisBackend is the same pattern on Redis: redis.NewClient and
// redissimba.New do no I/O; the start hook checks the server.
func redisBackend(addr, ns string) fx.Option {
	return fx.Provide(func(lc fx.Lifecycle) (session.Backend, error) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b, err := redissimba.New(rdb, ns)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error {
				if _, err := b.CheckServer(ctx); err != nil {
					return err
				}
				// The test's namespace is new: create it. An application
				// calls Init, safe at every start (ADR 0165); the test
				// calls ForceInit, since Init refuses on a server started
				// less than a maximum lease ago (CI's).
				return b.ForceInit(ctx)
			},
			OnStop: func(ctx context.Context) error {
				defer func() { _ = rdb.Close() }()
				return b.Shutdown(ctx)
			},
		})
		return b, nil
	})
}

func TestModuleOnRealBackends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) fx.Option
	}{
		{"postgres", func(t *testing.T) fx.Option {
			return postgresBackend(mustEnv(t, "SIMBA_POSTGRES_URL"), "fxsimba_")
		}},
		{"redis", func(t *testing.T) fx.Option {
			// A namespace of its own per run: Init creates its epoch with the
			// server's run_id, whereas a fixed one would keep an epoch from
			// another Redis process (a restart of the shared server) and wait
			// out the quarantine that follows every restart (ADR 0131).
			return redisBackend(mustEnv(t, "SIMBA_REDIS_ADDR"), fmt.Sprintf("fxsimba-%d", time.Now().UnixNano()))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stepDownHandsOver(t, tc.backend)
		})
	}
}

// stepDownHandsOver runs two nodes of an fx application with one
// WhileLeader job; the leader's handle steps it down and the other node's
// handle reports that it now leads.
func stepDownHandsOver(t *testing.T, backend func(t *testing.T) fx.Option) {
	// Unique per run: a lease left by an earlier, killed run cannot delay
	// this one.
	job := fmt.Sprintf("fxjob-%d", time.Now().UnixNano())
	elected := make(chan int, 8)
	node := func(i int) *fxsimba.Jobs {
		var jobs *fxsimba.Jobs
		app := fxtest.New(t,
			fx.Provide(fxsimba.Module),
			backend(t), env(nil), quiet(),
			fxsimba.WhileLeader(job, func(ctx context.Context, _ *term.Term) error {
				elected <- i
				<-ctx.Done()
				return nil
			}),
			fx.Populate(&jobs),
		)
		app.RequireStart()
		t.Cleanup(app.RequireStop)
		return jobs
	}
	nodes := []*fxsimba.Jobs{node(0), node(1)}
	handle := func(i int) *fxsimba.JobHandle {
		h, ok := nodes[i].Get(job)
		if !ok {
			t.Fatalf("node %d: Get(%q) found no job", i, job)
		}
		return h
	}
	wait := func() int {
		t.Helper()
		select {
		case i := <-elected:
			return i
		case <-time.After(30 * time.Second): // a bound on a hang, not a wait for a state
			t.Fatal("no node was elected within 30s")
			return -1
		}
	}
	first := wait()
	if !handle(first).IsLeader() {
		t.Fatalf("node %d runs the job but its handle says it does not lead (status %v)", first, handle(first).Status())
	}
	if err := handle(first).StepDown(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	second := wait()
	if second == first {
		t.Fatalf("node %d stepped down for a minute but was elected again", first)
	}
	if !handle(second).IsLeader() {
		t.Fatalf("node %d was elected but its handle says it does not lead (status %v)", second, handle(second).Status())
	}
	if got := handle(first).Status(); got != election.Cooldown {
		t.Fatalf("node %d after StepDown: status %v, want %v", first, got, election.Cooldown)
	}
}

// warnings is a slog handler that keeps every record at WARN or above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	w.mu.Lock()
	w.msgs = append(w.msgs, b.String())
	w.mu.Unlock()
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// freshSchema is a PostgreSQL schema of the test's own, dropped at the end,
// and a pool whose search_path is it: pgsimba's tables and functions land
// there, as on a database nobody has used yet.
func freshSchema(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("fxsimba_fresh_%d", time.Now().UnixNano())
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop the test's schema %s: %v", name, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The README's fx + PostgreSQL pattern on a database that has never seen
// Simba starts without a single warning (issue 22, item 7): the session
// opens in its start hook, after the backend's hook has created the
// schema. When the session opened at construction, every fresh start
// logged "SessionSuspended … no schema installed".
func TestFreshPostgresStartsWithoutWarning(t *testing.T) {
	pool := freshSchema(t, mustEnv(t, "SIMBA_POSTGRES_URL"))
	w := &warnings{}
	log := slog.New(w)
	app := fxtest.New(t,
		fx.Provide(fxsimba.Module),
		fx.Supply(log),
		env(nil),
		fx.Provide(func(lc fx.Lifecycle) (session.Backend, error) {
			b, err := pgsimba.New(context.Background(), pool, pgsimba.WithoutSchemaCreation(), pgsimba.WithLogger(log))
			if err != nil {
				return nil, err
			}
			lc.Append(fx.Hook{
				OnStart: func(ctx context.Context) error {
					_, err := pgsimba.New(ctx, pool, pgsimba.WithLogger(log))
					return err
				},
				OnStop: b.Shutdown,
			})
			return b, nil
		}),
		fxsimba.WhileLeader("fresh", func(ctx context.Context, _ *term.Term) error {
			<-ctx.Done()
			return nil
		}),
	)
	app.RequireStart()
	app.RequireStop()
	if got := w.all(); len(got) > 0 {
		t.Fatalf("a correct setup on a fresh database logged %d warnings, want none:\n%s", len(got), strings.Join(got, "\n"))
	}
}
