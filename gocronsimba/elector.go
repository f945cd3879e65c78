package gocronsimba

import (
	"context"
	"errors"
	"fmt"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/term"
)

// ErrNotLeader is returned by [LeaderElector.IsLeader] (so gocron skips
// the run) and by a task wrapped with [LeaderElector.Task] when this
// scheduler's election holds no valid term.
var ErrNotLeader = errors.New("gocronsimba: not the leader")

// LeaderElector is a gocron.Elector backed by a Simba election. It is safe
// for concurrent use.
type LeaderElector struct {
	e    *election.Election
	opts options
}

// Elector returns a gocron.Elector that answers yes only while e holds a
// term valid for more than the [MinValidity] option (zero by default).
// Pass it to gocron.WithDistributedElector. Closing e is the caller's job.
func Elector(e *election.Election, opts ...Option) *LeaderElector {
	return &LeaderElector{e: e, opts: collect(opts)}
}

// IsLeader implements gocron.Elector: nil while this scheduler's election
// holds a valid term, an error matching [ErrNotLeader] (or
// [term.ErrExpired] when the term will end within MinValidity) otherwise.
func (l *LeaderElector) IsLeader(context.Context) error {
	_, err := l.term()
	return err
}

func (l *LeaderElector) term() (*term.Term, error) {
	if l == nil || l.e == nil {
		return nil, fmt.Errorf("%w: gocronsimba.Elector was given a nil *election.Election", ErrNotLeader)
	}
	t := l.e.Term()
	if t == nil {
		return nil, fmt.Errorf("%w: election %q is %v", ErrNotLeader, l.e.Name(), l.e.Status())
	}
	if err := t.EnsureValid(l.opts.minValidity); err != nil {
		return nil, err
	}
	return t, nil
}

// Task wraps fn for gocron.NewTask: each run takes the election's current
// term (failing with [ErrNotLeader] when there is none, so a run that
// gocron started just before the term ended does nothing) and runs fn with
// a context that ends when the job's context or the term ends.
func (l *LeaderElector) Task(fn election.Task) func(context.Context) error {
	return func(ctx context.Context) error {
		t, err := l.term()
		if err != nil {
			return err
		}
		return runUnder(ctx, t, fn)
	}
}

// runUnder runs fn with a context that ends with ctx or with the term t,
// whichever ends first; its cause is then the term's revoke reason.
func runUnder(ctx context.Context, t *term.Term, fn election.Task) error {
	if fn == nil {
		return errors.New("gocronsimba: Task was given a nil function")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(t.Context(), func() { cancel(context.Cause(t.Context())) })
	defer stop()
	return fn(ctx, t)
}
