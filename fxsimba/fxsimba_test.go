package fxsimba_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Tests that run the engine do so in a synctest bubble (virtual time; see
// session/session_test.go): fx starts no goroutine of its own for
// Start/Stop.

// env is a fake environment for LookupEnv.
func env(vars map[string]string) fx.Option {
	return fx.Provide(func() fxsimba.LookupEnv {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	})
}

func backend(b session.Backend) fx.Option {
	return fx.Provide(func() session.Backend { return b })
}

func newMemory(t *testing.T) *memory.Backend {
	t.Helper()
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// quiet is a logger that drops everything, provided to the module.
func quiet() fx.Option {
	return fx.Supply(slog.New(slog.DiscardHandler))
}

// log records what jobs do, in order, across nodes.
type log struct {
	mu    sync.Mutex
	lines []string
}

func (l *log) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *log) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func TestModuleOpensRunsJobsAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		var s *session.Session
		var runs sync.WaitGroup
		runs.Add(3)
		cleanups := 0
		var mu sync.Mutex
		var indexerCause error
		app := fxtest.New(t,
			fx.Provide(fxsimba.Module),
			backend(b), env(nil), quiet(),
			fxsimba.LeaderJob("cleanup", time.Second, func(ctx context.Context, tm *term.Term) error {
				mu.Lock()
				cleanups++
				if cleanups <= 3 {
					runs.Done()
				}
				mu.Unlock()
				return nil
			}),
			fxsimba.WhileLeader("indexer", func(ctx context.Context, tm *term.Term) error {
				<-ctx.Done()
				mu.Lock()
				indexerCause = context.Cause(ctx)
				mu.Unlock()
				return nil
			}),
			fx.Populate(&s),
		)
		app.RequireStart()
		if s.State() != session.Live {
			t.Fatalf("State() after start = %v, want LIVE", s.State())
		}
		<-time.After(2*time.Second + time.Millisecond) // runs at 0s, 1s, 2s
		runs.Wait()
		for _, name := range []string{"cleanup", "indexer"} {
			if id, _, ok := b.Owner(name); !ok || id != s.ID() {
				t.Fatalf("Owner(%q) = %q, %v; want this session %q", name, id, ok, s.ID())
			}
		}
		app.RequireStop()
		select {
		case <-s.Done():
		default:
			t.Fatal("session not closed after stop")
		}
		if !errors.Is(indexerCause, term.Stopped) {
			t.Fatalf("indexer's Cause(ctx) = %v, want STOPPED", indexerCause)
		}
		for _, name := range []string{"cleanup", "indexer"} {
			if _, _, ok := b.Owner(name); ok {
				t.Fatalf("%q still owned after stop", name)
			}
		}
	})
}

// Two nodes run the same WhileLeader job. Stopping the leader's app hands
// over in order: its task returns before the other node's task starts.
func TestStopHandsOverInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		var l log
		node := func(name string, c session.Backend) *fxtest.App {
			return fxtest.New(t, fx.Provide(fxsimba.Module), backend(c), env(nil), quiet(),
				fxsimba.WhileLeader("indexer", func(ctx context.Context, tm *term.Term) error {
					l.add("%s start %d", name, tm.Token())
					<-ctx.Done()
					<-time.After(time.Second) // a task that takes a while to wind down
					l.add("%s end %d", name, tm.Token())
					return nil
				}))
		}
		a := node("a", b)
		a.RequireStart()
		synctest.Wait()
		other := node("b", b.NewClient())
		other.RequireStart()
		synctest.Wait()
		a.RequireStop()
		synctest.Wait()
		want := []string{"a start 1", "a end 1", "b start 2"}
		if got := l.get(); strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("order = %q, want %q", got, want)
		}
		other.RequireStop()
	})
}

func TestConfigFromGraphAndEnvironment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s *session.Session
		var cfg fxsimba.Config
		cfg.Session.LeaseDuration = fxsimba.Duration(6 * time.Second)
		cfg.Session.MinBackoff = fxsimba.Duration(time.Second) // stays: not in the environment
		app := fxtest.New(t, fx.Provide(fxsimba.Module), backend(newMemory(t)), quiet(),
			fx.Supply(cfg),
			env(map[string]string{"SIMBA_SESSION_RENEW_INTERVAL": "1s", "SIMBA_SESSION_MARGIN": "0s", "SIMBA_SESSION_DRIFT": ""}),
			fx.Populate(&s))
		app.RequireStart()
		want := deadline.Config{LeaseDuration: 6 * time.Second, RenewInterval: time.Second, Drift: 0.01,
			Margin: 0, RetryJitter: 500 * time.Millisecond, MinBackoff: time.Second}
		if got := s.Config(); got != want {
			t.Fatalf("Config() = %+v, want %+v", got, want)
		}
		app.RequireStop()
	})
}

func TestInvalidConfigFailsNew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vars    map[string]string
		want    []string
		wrapped error
	}{
		{"not a duration", map[string]string{"SIMBA_SESSION_LEASE_DURATION": "fifteen"},
			[]string{"SIMBA_SESSION_LEASE_DURATION", "simba.session.leaseDuration", `"15s"`}, fxsimba.ErrInvalidConfig},
		{"negative", map[string]string{"SIMBA_SESSION_MIN_BACKOFF": "-1s"},
			[]string{"SIMBA_SESSION_MIN_BACKOFF", "must not be negative"}, fxsimba.ErrInvalidConfig},
		{"drift out of range", map[string]string{"SIMBA_SESSION_DRIFT": "0.5"},
			[]string{"SIMBA_SESSION_DRIFT", "[0, 0.5)"}, fxsimba.ErrInvalidConfig},
		{"rule 1", map[string]string{"SIMBA_SESSION_LEASE_DURATION": "15s", "SIMBA_SESSION_RENEW_INTERVAL": "8s"},
			[]string{"simba.session.renewInterval × 2 ≤ simba.session.leaseDuration"}, deadline.ErrInvalidConfig},
		{"rule 2", map[string]string{"SIMBA_SESSION_LEASE_DURATION": "1s", "SIMBA_SESSION_RENEW_INTERVAL": "500ms", "SIMBA_SESSION_DRIFT": "0.49"},
			[]string{"simba.session.leaseDuration × (1 − simba.session.drift) − simba.session.margin > simba.session.renewInterval"}, deadline.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := fx.New(fxsimba.Wiring, backend(newMemory(t)), env(tc.vars), fx.NopLogger)
			err := app.Err()
			if !errors.Is(err, tc.wrapped) {
				t.Fatalf("Err() = %v, want one wrapping %v", err, tc.wrapped)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Err() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestInvalidJobsFailNew(t *testing.T) {
	task := func(context.Context, *term.Term) error { return nil }
	for _, tc := range []struct {
		name    string
		opts    []fx.Option
		wrapped error
	}{
		{"invalid name", []fx.Option{fxsimba.WhileLeader("no/slash", task)}, deadline.ErrInvalidName},
		{"empty name", []fx.Option{fxsimba.LeaderJob("", time.Second, task)}, deadline.ErrInvalidName},
		{"zero interval", []fx.Option{fxsimba.LeaderJob("j", 0, task)}, fxsimba.ErrInvalidJob},
		{"no task", []fx.Option{fxsimba.WhileLeader("j", nil)}, fxsimba.ErrInvalidJob},
		{"same name twice", []fx.Option{fxsimba.WhileLeader("j", task), fxsimba.LeaderJob("j", time.Second, task)}, fxsimba.ErrInvalidJob},
		{"negative interval from a constructor", []fx.Option{fxsimba.AsJob(func() fxsimba.Job {
			return fxsimba.Job{Name: "j", Every: -time.Second, Task: task}
		})}, fxsimba.ErrInvalidJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]fx.Option{fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), fx.NopLogger}, tc.opts...)
			if err := fx.New(opts...).Err(); !errors.Is(err, tc.wrapped) {
				t.Fatalf("Err() = %v, want one wrapping %v", err, tc.wrapped)
			}
		})
	}
}

func TestMissingBackendFailsNew(t *testing.T) {
	err := fx.New(fxsimba.Wiring, env(nil), fx.NopLogger).Err()
	// session.Backend is an alias: fx names the type it stands for.
	if err == nil || !strings.Contains(err.Error(), "driver.Backend") {
		t.Fatalf("Err() = %v, want a missing driver.Backend (session.Backend)", err)
	}
}

func TestStartFailsWhenNoSessionOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		b.Pause() // the backend never answers
		var s *session.Session
		app := fx.New(fx.Provide(fxsimba.Module), backend(b), env(nil), quiet(), fx.NopLogger, fx.Populate(&s),
			fxsimba.WhileLeader("j", func(context.Context, *term.Term) error { return nil }))
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := app.Start(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start: %v, want the start deadline", err)
		}
		// fx runs no stop hook for a failed start: the hook closes the
		// session itself (goleak then finds nothing left).
		b.Resume()
		select {
		case <-s.Done():
		case <-time.After(time.Minute):
			t.Fatal("session not closed after a failed start")
		}
	})
}

func TestAsJobWithDependenciesAndSessionOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type greeting string
		var mu sync.Mutex
		var got []string
		var kinds []session.EventKind
		app := fxtest.New(t, fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(),
			fx.Supply(greeting("hello")),
			fxsimba.AsJob(func(g greeting) fxsimba.Job {
				return fxsimba.Job{Name: "greeter", Every: time.Minute, Task: func(ctx context.Context, tm *term.Term) error {
					mu.Lock()
					got = append(got, fmt.Sprintf("%s from %v", g, tm))
					mu.Unlock()
					return nil
				}}
			}),
			fxsimba.AsSessionOption(func() session.Option {
				return session.WithListener(func(e session.Event) { mu.Lock(); kinds = append(kinds, e.Kind); mu.Unlock() })
			}),
			fxsimba.SessionOption(session.WithListener(func(e session.Event) {})),
		)
		app.RequireStart()
		synctest.Wait()
		mu.Lock()
		if len(got) != 1 || got[0] != "hello from greeter#1" {
			t.Fatalf("runs = %q, want [hello from greeter#1]", got)
		}
		if len(kinds) < 2 || kinds[0] != session.SessionOpened || kinds[1] != session.TermElected {
			t.Fatalf("events = %v, want SessionOpened, TermElected first", kinds)
		}
		mu.Unlock()
		app.RequireStop()
	})
}

func TestJobErrorsGoToTheLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelError}))
		app := fxtest.New(t, fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), fx.Supply(logger),
			fxsimba.LeaderJob("flaky", time.Second, func(context.Context, *term.Term) error { return errors.New("disk full") }),
			fxsimba.WhileLeader("quitter", func(context.Context, *term.Term) error { return errors.New("gave up") }))
		app.RequireStart()
		synctest.Wait()
		app.RequireStop()
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		for _, w := range []string{"job=flaky", "disk full", "job=quitter", "gave up"} {
			if !strings.Contains(out, w) {
				t.Fatalf("log = %q, want it to contain %q", out, w)
			}
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// StartJobs and Stop without fx.
func TestStartJobsWithoutFx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemory(t)
		s, err := session.Open(context.Background(), b, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var errs []error
		var mu sync.Mutex
		js, err := fxsimba.StartJobs(s, nil,
			fxsimba.Job{Name: "a", Task: func(ctx context.Context, _ *term.Term) error { <-ctx.Done(); return nil }},
			fxsimba.Job{Name: "b", Every: time.Second, Task: func(context.Context, *term.Term) error { return errors.New("b failed") },
				OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }},
		)
		if err != nil {
			t.Fatal(err)
		}
		<-time.After(time.Second + time.Millisecond)
		synctest.Wait()
		es := js.Elections()
		if len(es) != 2 || es[0].Name() != "a" || es[1].Name() != "b" {
			t.Fatalf("Elections() = %v, want a, b", es)
		}
		for _, e := range es {
			if e.Status() != election.Leader {
				t.Fatalf("%s: Status() = %v, want LEADER", e.Name(), e.Status())
			}
		}
		if err := js.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Status() != election.Stopped {
				t.Fatalf("%s: Status() after Stop = %v, want STOPPED", e.Name(), e.Status())
			}
		}
		mu.Lock()
		if len(errs) != 2 {
			t.Fatalf("OnError calls = %d, want 2 (runs at 0s and 1s)", len(errs))
		}
		mu.Unlock()

		// A name already started on the session: nothing is left running.
		other, err := election.Start(s, "taken")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		task := func(ctx context.Context, _ *term.Term) error { <-ctx.Done(); return nil }
		_, err = fxsimba.StartJobs(s, nil, fxsimba.Job{Name: "first", Task: task}, fxsimba.Job{Name: "taken", Task: task})
		if !errors.Is(err, election.ErrAlreadyStarted) {
			t.Fatalf("StartJobs: %v, want ErrAlreadyStarted", err)
		}
		for _, e := range s.Snapshot().Entries {
			if e.Name == "first" {
				t.Fatal("job \"first\" still registered after StartJobs failed")
			}
		}
	})
}

// A handle exists from construction, so constructors can keep it; before
// start it reports Stopped and refuses StepDown.
func TestJobHandleBeforeStart(t *testing.T) {
	var jobs *fxsimba.Jobs
	app := fx.New(fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(),
		fxsimba.WhileLeader("early", func(ctx context.Context, _ *term.Term) error { <-ctx.Done(); return nil }),
		fx.Populate(&jobs), fx.NopLogger)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := jobs.Get("other"); ok {
		t.Fatal(`Get("other") found a job that was never registered`)
	}
	h, ok := jobs.Get("early")
	if !ok {
		t.Fatal(`Get("early") found nothing`)
	}
	if h.IsLeader() || h.Status() != election.Stopped {
		t.Fatalf("before start: IsLeader %v, status %v; want false, STOPPED", h.IsLeader(), h.Status())
	}
	if err := h.StepDown(context.Background(), time.Second); !errors.Is(err, fxsimba.ErrJobNotRunning) {
		t.Fatalf("StepDown before start: %v, want ErrJobNotRunning", err)
	}
	// The session was built (it runs from construction): start and stop
	// it so goleak finds nothing.
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := app.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
