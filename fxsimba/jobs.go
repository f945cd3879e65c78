package fxsimba

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// @SimbaScheduled). An invalid job fails fx.New.
func LeaderJob(name string, interval time.Duration, task election.Task, opts ...election.Option) fx.Option {
	if interval <= 0 {
		return fx.Error(fmt.Errorf("%w: job %q: interval must be positive, got %v", ErrInvalidJob, name, interval))
	}
	return supplyJob(Job{Name: name, Every: interval, Task: task, Options: opts})
}

// WhileLeader registers task to run for every term this node wins for
// name, under the term's context (the specification's runWhileLeader). On
// stop, the lease is kept until task returns (or the session's deadline
// passes), so the next leader's task never overlaps it. An invalid job
// fails fx.New.
func WhileLeader(name string, task election.Task, opts ...election.Option) fx.Option {
	return supplyJob(Job{Name: name, Task: task, Options: opts})
}

func supplyJob(j Job) fx.Option {
	if err := j.validate(); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(func() Job { return j }, fx.ResultTags(groupJobs)))
}

// AsJob registers the [Job] that constructor returns, for jobs that need
// other values of the graph:
//
//	fxsimba.AsJob(func(db *sql.DB) fxsimba.Job {
//		return fxsimba.Job{Name: "purge", Every: time.Hour, Task: purger(db)}
//	})
func AsJob(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(groupJobs)))
}

// Jobs is a set of running jobs, one election each.
type Jobs struct {
	elections []*election.Election
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

// StartJobs starts one election per job on s, in order. log receives the
// errors of jobs without OnError (nil: slog.Default). If a job cannot
// start, those already started are stopped and the error returned. It does
// not block: the elections compete in the background.
func StartJobs(s *session.Session, log *slog.Logger, jobs ...Job) (*Jobs, error) {
	if err := CheckJobs(jobs...); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	js := &Jobs{}
	for _, j := range jobs {
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
			return nil, errors.Join(fmt.Errorf("fxsimba: start job %q: %w", j.Name, err), stopErr)
		}
		js.elections = append(js.elections, e)
	}
	return js, nil
}

// Elections returns the jobs' elections, in start order.
func (js *Jobs) Elections() []*election.Election {
	return append([]*election.Election(nil), js.elections...)
}

// Stop stops every job's election, the last started first, each in
// handover order: its term is revoked, its task's context cancelled, the
// lease kept until the task returns, then released. It returns when all
// are stopped or ctx ends.
func (js *Jobs) Stop(ctx context.Context) error {
	var errs []error
	for i := len(js.elections) - 1; i >= 0; i-- {
		e := js.elections[i]
		if err := e.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("fxsimba: stop job %q: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

type jobsParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	Session   *session.Session
	Logger    *slog.Logger `optional:"true"`
	Jobs      []Job        `group:"simba.jobs"`
}

type checkParams struct {
	fx.In

	Jobs []Job `group:"simba.jobs"`
}

// checkJobs makes a bad job fail fx.New.
func checkJobs(p checkParams) error { return CheckJobs(p.Jobs...) }

// startJobs runs the jobs between start and stop. Its hook is appended after
// the session's, so fx stops the jobs before it closes the session.
func startJobs(p jobsParams) {
	var js *Jobs
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var err error
			js, err = StartJobs(p.Session, p.Logger, p.Jobs...)
			return err
		},
		OnStop: func(ctx context.Context) error { return js.Stop(ctx) },
	})
}
