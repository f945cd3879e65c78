package fxsimba

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	"go.uber.org/fx"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// ErrInvalidJob is wrapped by the error for a job that cannot run: an
// invalid name, a missing task, a negative interval, or a name used twice.
var ErrInvalidJob = errors.New("fxsimba: invalid job")

// Job is leader-only work: one election for Name on the session, running
// Task while it leads. With Every > 0, Task runs every Every (counted from
// the end of the previous run) under the term's context, like
// election.Every; with Every == 0, Task runs once per term, its context
// cancelled when the term ends, like election.RunWhileLeader.
type Job struct {
	// Name is the lease name (deadline.ValidateName's rules: 1–128
	// characters of [A-Za-z0-9._:-], not "." or "..").
	Name string
	// Every is the interval of a periodic job, or 0 for a task that runs
	// for the whole term.
	Every time.Duration
	// Task is the work.
	Task election.Task
	// OnError receives Task's errors. Nil logs them at error level (the
	// Module's logger, else slog.Default).
	OnError func(error)
	// Options are more election options (a listener, an executor).
	Options []election.Option
}

func (j Job) validate() error {
	if err := deadline.ValidateName(j.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if j.Task == nil {
		return fmt.Errorf("%w: job %q has no task", ErrInvalidJob, j.Name)
	}
	if j.Every < 0 {
		return fmt.Errorf("%w: job %q: interval must not be negative, got %v", ErrInvalidJob, j.Name, j.Every)
	}
	return nil
}

// LeaderJob registers task to run every interval while this node leads
// name: a leader-only scheduled job (the specification's schedule and
// @SimbaScheduled).
//
// task is an election.Task, or, for a task that needs values of the fx
// graph, a constructor like those given to fx.Provide: a function whose
// parameters fx resolves and which returns the election.Task (and
// optionally an error, which fails fx.New):
//
//	fxsimba.LeaderJob("purge", time.Hour, func(db *sql.DB) election.Task {
//		return func(ctx context.Context, t *term.Term) error { return purge(ctx, db, t.Token()) }
//	})
//
// An invalid job fails fx.New, wrapping ErrInvalidJob.
func LeaderJob(name string, interval time.Duration, task any, opts ...election.Option) fx.Option {
	if interval <= 0 {
		return fx.Error(fmt.Errorf("%w: job %q: interval must be positive, got %v", ErrInvalidJob, name, interval))
	}
	return provideJob(Job{Name: name, Every: interval, Options: opts}, task)
}

// WhileLeader registers task to run for every term this node wins for
// name, under the term's context (the specification's runWhileLeader). On
// stop, the lease is kept until task returns (or the session's deadline
// passes), so the next leader's task never overlaps it. task is an
// election.Task or a constructor returning one, as for [LeaderJob]. An
// invalid job fails fx.New.
func WhileLeader(name string, task any, opts ...election.Option) fx.Option {
	return provideJob(Job{Name: name, Options: opts}, task)
}

// provideJob provides j, its Task given by task (the task, or a
// constructor of it from the graph), to the jobs group.
func provideJob(j Job, task any) fx.Option {
	what := fmt.Sprintf("job %q", j.Name)
	want := reflect.TypeFor[election.Task]()
	direct, ctor, err := taskOrConstructor(task, want, what)
	if err != nil {
		return fx.Error(err)
	}
	if direct.IsValid() {
		j.Task = direct.Interface().(election.Task)
	} else {
		j.Task = func(context.Context, *term.Term) error { return nil } // validated now, replaced when built
	}
	if err := j.validate(); err != nil {
		return fx.Error(err)
	}
	build := withDeps(direct, ctor, want, what, nil, []reflect.Type{reflect.TypeFor[Job]()},
		func(_ []reflect.Value, tv reflect.Value) ([]reflect.Value, error) {
			built := j
			built.Task = tv.Interface().(election.Task)
			return []reflect.Value{reflect.ValueOf(built)}, nil
		})
	return fx.Options(fx.Provide(fx.Annotate(build, fx.ResultTags(groupJobs))), needJobs)
}

// needJobs makes fx build the registry, hence run [Module], in an
// application that registers jobs but takes nothing Module provides.
var needJobs = fx.Invoke(func(*Jobs) {})

// AsJob registers the [Job] that constructor returns, for jobs that need
// other values of the graph:
//
//	fxsimba.AsJob(func(db *sql.DB) fxsimba.Job {
//		return fxsimba.Job{Name: "purge", Every: time.Hour, Task: purger(db)}
//	})
func AsJob(constructor any) fx.Option {
	return fx.Options(fx.Provide(fx.Annotate(constructor, fx.ResultTags(groupJobs))), needJobs)
}

// ErrJobNotRunning is wrapped by [JobHandle.StepDown] before the job's
// election has started (before fx's start hooks have run).
var ErrJobNotRunning = errors.New("fxsimba: job not running")

// Jobs is the registry of an application's leader jobs, one election each.
// [Module] provides it to the fx graph, so any constructor or hook can take
// a *Jobs and reach a job by name.
type Jobs struct {
	handles []*JobHandle
	byName  map[string]*JobHandle
	jobs    []Job
}

// JobHandle is one leader job as the rest of the application sees it: it
// exists from construction, and reaches the job's election between start
// and stop.
type JobHandle struct {
	name string
	// e is set by start, read by any goroutine of the application.
	e atomic.Pointer[election.Election]
}

// Name is the job's lease name.
func (h *JobHandle) Name() string { return h.name }

// Election returns the job's election, or nil before start.
func (h *JobHandle) Election() *election.Election { return h.e.Load() }

// Status is the state of the job's election; election.Stopped before
// start.
func (h *JobHandle) Status() election.Status {
	if e := h.e.Load(); e != nil {
		return e.Status()
	}
	return election.Stopped
}

// IsLeader reports whether this node leads the job now. Leadership can end
// at any moment after it returns: leader-only writes must be fenced with
// the term's token, not guarded by IsLeader.
func (h *JobHandle) IsLeader() bool { return h.Status() == election.Leader }

// StepDown gives up the job's leadership, if held, and stays out of the
// election for cooldown (election.Election.StepDown): before a deploy, so
// another node takes over at once. It wraps [ErrJobNotRunning] before
// start, and the election's error after stop.
func (h *JobHandle) StepDown(ctx context.Context, cooldown time.Duration) error {
	e := h.e.Load()
	if e == nil {
		return fmt.Errorf("%w: %q", ErrJobNotRunning, h.name)
	}
	if err := e.StepDown(ctx, cooldown); err != nil {
		return fmt.Errorf("fxsimba: step down %q: %w", h.name, err)
	}
	return nil
}

// Get returns the handle of the job named name, and whether there is one.
func (js *Jobs) Get(name string) (*JobHandle, bool) {
	h, ok := js.byName[name]
	return h, ok
}

// Names returns the jobs' names, in start order.
func (js *Jobs) Names() []string {
	names := make([]string, len(js.handles))
	for i, h := range js.handles {
		names[i] = h.name
	}
	return names
}

// CheckJobs reports the first invalid job, or a name used twice.
func CheckJobs(jobs ...Job) error {
	seen := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if err := j.validate(); err != nil {
			return err
		}
		if seen[j.Name] {
			return fmt.Errorf("%w: two jobs named %q (each job is one election for its name)", ErrInvalidJob, j.Name)
		}
		seen[j.Name] = true
	}
	return nil
}

// newJobs checks the jobs and builds their registry, with no election yet.
func newJobs(jobs ...Job) (*Jobs, error) {
	if err := CheckJobs(jobs...); err != nil {
		return nil, err
	}
	js := &Jobs{byName: make(map[string]*JobHandle, len(jobs)), jobs: jobs}
	for _, j := range jobs {
		h := &JobHandle{name: j.Name}
		js.handles = append(js.handles, h)
		js.byName[j.Name] = h
	}
	return js, nil
}

// StartJobs starts one election per job on s, in order. log receives the
// errors of jobs without OnError (nil: slog.Default). If a job cannot
// start, those already started are stopped and the error returned. It does
// not block: the elections compete in the background.
func StartJobs(s *session.Session, log *slog.Logger, jobs ...Job) (*Jobs, error) {
	js, err := newJobs(jobs...)
	if err != nil {
		return nil, err
	}
	if err := js.start(s, log); err != nil {
		return nil, err
	}
	return js, nil
}

func (js *Jobs) start(s *session.Session, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	for i, j := range js.jobs {
		onError := j.OnError
		if onError == nil {
			name := j.Name
			onError = func(err error) {
				log.Error("simba: leader job failed", slog.String("job", name), slog.Any("err", err))
			}
		}
		var run election.Option
		if j.Every > 0 {
			run = election.Every(j.Every, j.Task, onError)
		} else {
			task := j.Task
			run = election.RunWhileLeader(func(ctx context.Context, t *term.Term) error {
				err := task(ctx, t)
				if err != nil && ctx.Err() == nil {
					onError(err)
				}
				return err
			})
		}
		e, err := election.Start(s, j.Name, append([]election.Option{run}, j.Options...)...)
		if err != nil {
			stopErr := js.Stop(context.Background())
			return errors.Join(fmt.Errorf("fxsimba: start job %q: %w", j.Name, err), stopErr)
		}
		js.handles[i].e.Store(e)
	}
	return nil
}

// Elections returns the jobs' elections, in start order (those started).
func (js *Jobs) Elections() []*election.Election {
	var es []*election.Election
	for _, h := range js.handles {
		if e := h.e.Load(); e != nil {
			es = append(es, e)
		}
	}
	return es
}

// Stop stops every job's election, the last started first, each in
// handover order: its term is revoked, its task's context cancelled, the
// lease kept until the task returns, then released. It returns when all
// are stopped or ctx ends.
func (js *Jobs) Stop(ctx context.Context) error {
	var errs []error
	for i := len(js.handles) - 1; i >= 0; i-- {
		e := js.handles[i].e.Load()
		if e == nil {
			continue
		}
		if err := e.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("fxsimba: stop job %q: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}
