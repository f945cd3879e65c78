package fxsimba_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.uber.org/fx"

	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The idiomatic way in: fx.New with fx.Provide(fxsimba.Module), your backend, your jobs.
func ExampleModule() {
	ran := make(chan string, 1)
	app := fx.New(
		fx.Provide(fxsimba.Module),
		// In production: pgsimba, mysqlsimba, backend-redis or backend-zk,
		// built from the driver client your application already provides.
		fx.Provide(func() (session.Backend, error) { return memory.New() }),
		fx.Supply(slog.New(slog.DiscardHandler)), // your logger, if any
		fxsimba.LeaderJob("nightly-report", 24*time.Hour, func(ctx context.Context, t *term.Term) error {
			ran <- t.String() // fence your writes with t.Token()
			return nil
		}),
		fx.NopLogger,
	)
	if err := app.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ran as", <-ran)
	if err := app.Stop(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output: ran as nightly-report#1
}

func ExampleWhileLeader() {
	started, stopped := make(chan struct{}), make(chan error, 1)
	app := fx.New(
		fx.Provide(fxsimba.Module),
		fx.Provide(func() (session.Backend, error) { return memory.New() }),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fxsimba.WhileLeader("indexer", func(ctx context.Context, t *term.Term) error {
			close(started)
			<-ctx.Done() // leadership ended: stop at once
			stopped <- context.Cause(ctx)
			return nil
		}),
		fx.NopLogger,
	)
	_ = app.Start(context.Background())
	<-started                          // Start does not wait for leadership: the election competes in the background
	_ = app.Stop(context.Background()) // returns after the task returned and the lease was released
	fmt.Println(<-stopped)
	// Output: simba: term revoked: STOPPED
}

func ExampleConfig_ApplyEnv() {
	var app struct {
		Simba fxsimba.Config `json:"simba"`
	}
	_ = json.Unmarshal([]byte(`{"simba":{"session":{"leaseDuration":"30s"}}}`), &app)
	env := map[string]string{"SIMBA_SESSION_RENEW_INTERVAL": "6s"}
	cfg, err := app.Simba.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := cfg.Deadline() // pass to session.WithConfig
	if err != nil {
		fmt.Println(err)
		return
	}
	d = d.WithDefaults()
	fmt.Println(d.LeaseDuration, d.RenewInterval, d.RetryJitter)

	env["SIMBA_SESSION_RENEW_INTERVAL"] = "20s"
	cfg, _ = app.Simba.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	_, err = cfg.Deadline()
	fmt.Println(err)
	// Output:
	// 30s 6s 3s
	// fxsimba: invalid config: simba.session.renewInterval × 2 ≤ simba.session.leaseDuration does not hold: 2 × 20s > 30s
}

// Jobs without fx.
func ExampleStartJobs() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()
	ran := make(chan uint64, 1)
	jobs, err := fxsimba.StartJobs(s, nil, fxsimba.Job{Name: "compaction", Every: time.Hour,
		Task: func(ctx context.Context, t *term.Term) error { ran <- t.Token(); return nil }})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token", <-ran)
	_ = jobs.Stop(context.Background())
	// Output: token 1
}

// Wiring is Module as an fx.Option: it builds the session even when nothing
// in the graph takes it.
func ExampleWiring() {
	var s *session.Session
	app := fx.New(
		fxsimba.Wiring,
		fx.Provide(func() (session.Backend, error) { return memory.New() }),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fx.Populate(&s),
		fx.NopLogger,
	)
	if err := app.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case <-s.Ready():
		fmt.Println("session open after start")
	default:
		fmt.Println("session not open")
	}
	_ = app.Stop(context.Background())
	// Output: session open after start
}

// A job's handle, reached through the Jobs registry of the graph: step down
// before a deploy so that another node takes over at once.
func ExampleJobHandle_StepDown() {
	elected := make(chan struct{}, 1)
	var jobs *fxsimba.Jobs
	app := fx.New(
		fx.Provide(fxsimba.Module),
		fx.Provide(func() (session.Backend, error) { return memory.New() }),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fxsimba.WhileLeader("indexer", func(ctx context.Context, _ *term.Term) error {
			elected <- struct{}{}
			<-ctx.Done()
			return nil
		}),
		fx.Populate(&jobs),
		fx.NopLogger,
	)
	if err := app.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	<-elected
	h, _ := jobs.Get("indexer")
	fmt.Println("leader:", h.IsLeader())
	if err := h.StepDown(context.Background(), time.Hour); err != nil {
		fmt.Println(err)
	}
	fmt.Println("leader:", h.IsLeader(), "status:", h.Status())
	_ = app.Stop(context.Background())
	// Output:
	// leader: true
	// leader: false status: COOLDOWN
}

// Orders is a value of the application's graph (a *sql.DB, a client).
type Orders struct{ Table string }

// A partitioned job whose task needs values of the graph: give a
// constructor, as to fx.Provide; fx resolves its parameters. LeaderJob and
// WhileLeader take the same.
func ExamplePartitionedJob() {
	done := make(chan int, 4)
	app := fx.New(
		fx.Provide(fxsimba.Module),
		fx.Provide(func() (session.Backend, error) { return memory.New() }),
		fx.Supply(slog.New(slog.DiscardHandler), &Orders{Table: "orders"}),
		fxsimba.PartitionedJob("orders", 4, func(o *Orders) group.Task {
			return func(ctx context.Context, p int, t *term.Term) error {
				done <- p // consume partition p of o.Table, fenced with t.Token()
				<-ctx.Done()
				return nil
			}
		}),
		fx.NopLogger,
	)
	if err := app.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	seen := map[int]bool{}
	for len(seen) < 4 {
		seen[<-done] = true
	}
	fmt.Println("owns", len(seen), "partitions")
	_ = app.Stop(context.Background())
	// Output: owns 4 partitions
}
