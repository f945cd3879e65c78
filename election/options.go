package election

import (
	"context"
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
	waitCtx   context.Context // WaitFirstAttempt's, nil: Start returns at once
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

// RunWhileLeader runs task for every term the election wins.
func RunWhileLeader(task Task) Option {
	return func(o *options) { o.tasks = append(o.tasks, task) }
}

// Every runs job every interval while the election is leader, under the
// term's context: a leader-only scheduled job. Runs never overlap (the next
// interval is counted from the end of the previous run); while not leader
// nothing runs and nothing is queued. The first run starts when the term
// begins. An error from job is passed to onError (if not nil) and does not
// stop the schedule.
func Every(interval time.Duration, job Task, onError func(error)) Option {
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
// attempt of the election did not win: err is nil when another session
// holds the lease, else why the attempt failed. Package lock's TryAcquire
// uses it.
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
