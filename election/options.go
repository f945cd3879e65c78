package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/term"
)

// Listener hears about an election's terms. Every OnElected(t) is followed
// by exactly one OnRevoked(t, reason) for the same term. The callbacks of
// one election run one at a time, in order, over its Executor, with no
// engine lock held; they may call the election (StepDown, Stop) but then do
// not wait for the handover, which waits for them.
type Listener interface {
	OnElected(t *term.Term)
	OnRevoked(t *term.Term, reason term.RevokeReason)
}

// Funcs adapts a pair of functions to a Listener; a nil field is skipped.
type Funcs struct {
	Elected func(t *term.Term)
	Revoked func(t *term.Term, reason term.RevokeReason)
}

// OnElected calls f.Elected.
func (f Funcs) OnElected(t *term.Term) {
	if f.Elected != nil {
		f.Elected(t)
	}
}

// OnRevoked calls f.Revoked.
func (f Funcs) OnRevoked(t *term.Term, r term.RevokeReason) {
	if f.Revoked != nil {
		f.Revoked(t, r)
	}
}

// Task is leader work: it runs for each term under the term's context,
// which is cancelled (with the RevokeReason as its cause) when the term
// ends. A voluntary handover (Stop, StepDown) keeps the lease until the
// task returns or the session's local deadline passes, so the next leader's
// task never overlaps it. Returning early does not give up leadership.
type Task func(ctx context.Context, t *term.Term) error

// An Option configures an election.
type Option func(*options)

type options struct {
	listener  Listener
	exec      Executor
	tasks     []Task
	oneTerm   bool
	kind      string
	onRefuse  func(error)
	onAttempt func(error)
	onWon     func(*term.Term)
	lockDelay time.Duration
	waitCtx   context.Context // WaitFirstAttempt's, nil: Start returns at once
	err       error           // an invalid option's, returned by Start
}

// invalid records why an option is refused: Start returns it.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

// WithListener sets the election's listener.
func WithListener(l Listener) Option { return func(o *options) { o.listener = l } }

// WithExecutor runs the election's callbacks on x instead of a goroutine
// each. [Direct] runs them on the engine's goroutine.
func WithExecutor(x Executor) Option {
	return func(o *options) {
		if x != nil {
			o.exec = x
		}
	}
}

// RunWhileLeader runs task for every term the election wins. A nil task
// makes Start fail (ErrInvalidOption): it would crash the process at the
// first term won.
func RunWhileLeader(task Task) Option {
	return func(o *options) {
		if task == nil {
			o.invalid("RunWhileLeader(nil): a task is required")
			return
		}
		o.tasks = append(o.tasks, task)
	}
}

// Every runs job every interval while the election is leader, under the
// term's context: a leader-only scheduled job. Runs never overlap (the next
// interval is counted from the end of the previous run); while not leader
// nothing runs and nothing is queued. The first run starts when the term
// begins. An error from job is passed to onError (if not nil) and does not
// stop the schedule. A nil job or an interval that is not positive makes
// Start fail (ErrInvalidOption).
func Every(interval time.Duration, job Task, onError func(error)) Option {
	switch {
	case job == nil:
		return func(o *options) { o.invalid("Every(%v, nil, ...): a job is required", interval) }
	case interval <= 0:
		return func(o *options) { o.invalid("Every(%v, ...): the interval must be positive", interval) }
	}
	return RunWhileLeader(func(ctx context.Context, t *term.Term) error {
		for {
			if err := job(ctx, t); err != nil && onError != nil && ctx.Err() == nil {
				onError(err)
			}
			tick, stop := after(ctx, interval)
			select {
			case <-ctx.Done():
				stop()
				return nil
			case <-tick:
			}
		}
	})
}

// OnRefused calls f, with the engine's lock held, when the executor refuses
// an OnElected (the election then steps down for one lease duration). For
// logging and tests.
func OnRefused(f func(err error)) Option { return func(o *options) { o.onRefuse = f } }

// OnAttempt calls f, with the engine's lock held, when an acquisition
// attempt of the election did not win: err is nil when the lease is held
// (by another session, or by an earlier lease of this session whose
// release is being retried), else why the attempt failed.
func OnAttempt(f func(err error)) Option { return func(o *options) { o.onAttempt = f } }

// OnWon calls f, with the engine's lock held, when the election wins a term,
// before OnElected is queued: f must not block. Package lock uses it to hand
// the term to Acquire without going through the delivery loop, which a
// caller on that loop (a Direct callback) would be holding up.
func OnWon(f func(t *term.Term)) Option { return func(o *options) { o.onWon = f } }

// WaitFirstAttempt makes Start make the election's first attempt on the
// calling goroutine and return once the backend has answered it (won or
// not), instead of at once. For a caller that waits for the first term
// anyway (package lock's Acquire and TryAcquire) it saves two goroutine
// hops: the call's to a goroutine of its own and its reply's back. ctx
// bounds the wait: when it ends first, the attempt is given up as if it had
// timed out (a lease it won all the same is released). Start still
// returns at once when no attempt can leave now (the session is not LIVE,
// or another attempt of the session is in flight: this one then joins the
// next batch), and under a simulated Env.
func WaitFirstAttempt(ctx context.Context) Option {
	return func(o *options) { o.waitCtx = ctx }
}

// WithLockDelay asks the backend to keep the election's name refused to
// every session for d after a term of this election ends without a
// release: its session expired, its local deadline passed, it was taken
// over (Chubby's and Consul's lock-delay). A leader that was paused (a GC,
// a frozen VM) and wakes up believing in its term then finds nobody else
// at work on what it writes, for d: it protects resources that cannot
// check a fencing token. A voluntary handover (Stop, StepDown) releases
// the lease once the task has returned and skips the delay; a release
// that cannot reach the backend before the session expires leaves the
// name to that expiry, and the delay. When the local deadline passes, the
// backend session is left to expire, not closed, so that the delay counts.
// Session.Close frees the names at once, without waiting for the tasks:
// Stop the election first for the delay to cover a task still at work
// (ADR 0275).
//
// The delay is enforced by the backend on its own clock, never by the
// candidates'; each backend honours delays up to its WithMaxLockDelay
// (0 by default). A delay above that is a configuration error: the
// attempt is refused with an error wrapping session.ErrLockDelay, the
// election stops (Status STOPPED; OnAttempt gets the error; the session
// publishes LockDelayRefused, logged at ERROR), and with WaitFirstAttempt
// Start returns the error. Default 0: no delay. A negative d makes Start
// fail (ErrInvalidOption). ADR 0240.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.invalid("WithLockDelay(%v): the lock-delay must not be negative", d)
			return
		}
		o.lockDelay = d
	}
}

// SingleTerm makes the election take only one term: when it ends, for any
// reason (also StepDown, and an executor refusing its OnElected), the
// election stops and its name is released for good. Package
// lock is built on it; kind names the entry in Snapshot (e.g. "lock").
func SingleTerm(kind string) Option {
	return func(o *options) { o.oneTerm, o.kind = true, kind }
}

// after returns a channel closed d from now on the clock of the session
// that handed out ctx (virtual time in tests), and a function to stop it.
func after(ctx context.Context, d time.Duration) (<-chan struct{}, func() bool) {
	ch := make(chan struct{})
	fire := func() { close(ch) }
	if eng, ok := layer.FromContext(ctx); ok {
		return ch, eng.AfterFunc(d, fire)
	}
	return ch, time.AfterFunc(d, fire).Stop
}
