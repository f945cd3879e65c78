package term

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrExpired is matched (errors.Is) by the error [Term.EnsureValid] returns
// when the term has ended or will not stay valid long enough: a check made
// by this node, before it writes. It is not session.ErrExpired, which says
// that a backend session has expired on the backend.
var ErrExpired = errors.New("simba: term expired")

// ErrFenced is matched (errors.Is) by the error a fencing helper returns
// when a write carries a token lower than one that has already written: a
// later term owns the resource, this writer's term is over, and its write
// did not happen. Every backend's helper returns it (fence.ErrStale on SQL
// and redissimba.ErrFenced on Redis are this same value), so one check
// serves them all.
var ErrFenced = errors.New("simba: fenced: a later term has written")

// ErrDeadlineNear is the cause (context.Cause) of a context from
// [Term.ContextBefore] that ended because the term's local deadline came
// within its margin while the term was still valid.
var ErrDeadlineNear = errors.New("simba: term deadline near")

// A Timer is a [Lifeline] that can also run f once d has passed on the
// clock its Remaining reads. The engine's lifelines are Timers, so that
// [Term.ContextBefore] follows the engine's clock (virtual in the
// simulation); for a Lifeline that is not, the term uses the time package.
type Timer interface {
	Lifeline
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// A Lifeline tells how long the session a term belongs to may still be
// believed alive: the time left until its local deadline on the node's
// monotonic clock. Once Remaining has returned zero or less it must never
// return more again: a session that passed its deadline stays over.
type Lifeline interface {
	Remaining() time.Duration
}

// Term is one period in which this node owns a lease. Winning the same name
// twice gives two different Terms, so code handed one term can never get a
// later term's token. A Term is safe for concurrent use.
type Term struct {
	name   string
	token  uint64
	life   Lifeline
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	reason RevokeReason
	done   chan struct{}
	// befores are the ContextBefore contexts still waiting, by a key of
	// their own: revoke stops their timers on its own goroutine (the
	// engine's), so a Timer on a single-threaded simulated clock is never
	// called from a goroutine the context package started.
	befores map[*before]struct{}
}

// before is one ContextBefore context's pending check.
type before struct {
	mu   sync.Mutex
	stop func() bool // the pending timer's, nil once none is
	over bool        // ended: arm nothing more
}

// stopTimer stops the pending check and arms no other.
func (b *before) stopTimer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.over = true
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

// New returns a term of the lease name with token (which must be > 0),
// alive while life has time left and it has not been revoked. Its Context
// derives from parent (so that values in parent reach leader work).
//
// The returned revoke function ends the term for a reason; it reports
// whether this call was the one that ended it. Only the engine that owns
// the session calls it.
func New(parent context.Context, name string, token uint64, life Lifeline) (*Term, func(RevokeReason) bool) {
	if token == 0 {
		panic("term: token must be greater than zero")
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := &Term{name: name, token: token, life: life, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	return t, t.revoke
}

func (t *Term) revoke(r RevokeReason) bool {
	t.mu.Lock()
	if t.reason != 0 {
		t.mu.Unlock()
		return false
	}
	t.reason = r
	close(t.done)
	befores := t.befores
	t.befores = nil
	t.mu.Unlock()
	t.cancel(r)
	for b := range befores {
		b.stopTimer()
	}
	return true
}

// Name is the lease name.
func (t *Term) Name() string { return t.name }

// Token is the fencing token: greater than zero, fixed for the term, and
// strictly higher than the token of every earlier term of the same name.
func (t *Term) Token() uint64 { return t.token }

// Valid reports whether the term has not been revoked and the session's
// local deadline has not passed. It reads the clock itself: no background
// goroutine has to run first for it to turn false.
func (t *Term) Valid() bool { return t.Remaining() > 0 }

// Remaining is the time left until the session's local deadline, or zero
// once the term has ended.
func (t *Term) Remaining() time.Duration {
	t.mu.Lock()
	ended := t.reason != 0
	t.mu.Unlock()
	if ended {
		return 0
	}
	if r := t.life.Remaining(); r > 0 {
		return r
	}
	return 0
}

// EnsureValid returns nil if the term is valid and will stay valid for more
// than min, and otherwise (always once the term has ended, whatever min) an error matching [ErrExpired] (and, once the term has
// ended, its [RevokeReason]). Call it just before acting on a resource;
// pass the fencing token along so the resource can refuse a late act.
func (t *Term) EnsureValid(min time.Duration) error {
	rem := t.Remaining()
	if rem > 0 && rem > min { // an ended term fails whatever min is, even a negative one
		return nil
	}
	return &ExpiredError{Name: t.name, Token: t.token, Remaining: rem, Min: min, Reason: t.Reason()}
}

// ContextBefore returns a context that ends margin before the term's local
// deadline, or when the term ends if that comes first: its cause is
// [ErrDeadlineNear] in the first case and the [RevokeReason] in the
// second. Use it to stop starting writes a little before the term can no
// longer be believed, for writes that take time to land: a leader that
// writes in its last milliseconds races its own deadline.
//
// The deadline moves forward with each renewal, so the context ends only
// when a renewal has not come in time: it is computed on the same
// monotonic deadline as [Term.Remaining], checked again each time it
// could have been reached, and never ends later than the deadline itself
// (a negative margin counts as zero; a margin at least the time left ends
// it at once). Once ended, it stays ended even if a
// later renewal moves the deadline again: call ContextBefore again for a
// new one. Call cancel when done with it to stop its timer.
func (t *Term) ContextBefore(margin time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	margin = max(margin, 0)
	ctx, cancelCause := context.WithCancelCause(t.ctx)
	b := &before{}
	t.mu.Lock()
	if t.reason == 0 {
		if t.befores == nil {
			t.befores = map[*before]struct{}{}
		}
		t.befores[b] = struct{}{}
	}
	t.mu.Unlock()
	// end ends ctx and forgets b: called many times in one term, the
	// contexts that ended hold nothing of the term.
	end := func(cause error) {
		cancelCause(cause)
		b.stopTimer()
		t.mu.Lock()
		delete(t.befores, b)
		t.mu.Unlock()
	}
	var check func()
	check = func() {
		if ctx.Err() != nil {
			end(context.Cause(ctx)) // t.ctx's parent ended: forget b
			return
		}
		rem := t.Remaining()
		if rem <= margin {
			if rem > 0 {
				end(ErrDeadlineNear)
			} else {
				// Ended or passed: the term's own reason once it has one.
				end(t.endCause())
			}
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.over && ctx.Err() == nil {
			b.stop = t.after(rem-margin, check)
		}
	}
	check()
	return ctx, func() { end(context.Canceled) }
}

// endCause is why a context of the term ends when the term is no longer
// valid: its reason, or ErrDeadlineNear while the engine has not yet
// revoked a term whose deadline passed.
func (t *Term) endCause() error {
	if r := t.Reason(); r != 0 {
		return r
	}
	return ErrDeadlineNear
}

// after runs f after d on the lifeline's clock.
func (t *Term) after(d time.Duration, f func()) func() bool {
	if tm, ok := t.life.(Timer); ok {
		return tm.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

// Done returns a channel closed exactly once, when the term ends.
func (t *Term) Done() <-chan struct{} { return t.done }

// Reason is why the term ended, or zero while it has not.
func (t *Term) Reason() RevokeReason {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reason
}

// Context is cancelled when the term ends; context.Cause returns the
// [RevokeReason]. Run leader work under it.
func (t *Term) Context() context.Context { return t.ctx }

// String describes the term for logs, such as `jobs#42`.
func (t *Term) String() string { return fmt.Sprintf("%s#%d", t.name, t.token) }

// ExpiredError is the error [Term.EnsureValid] returns.
type ExpiredError struct {
	Name      string
	Token     uint64
	Remaining time.Duration // time left when checked (zero once ended)
	Min       time.Duration // the minimum the caller asked for
	Reason    RevokeReason  // zero while the term has not ended
}

func (e *ExpiredError) Error() string {
	if e.Reason != 0 {
		return fmt.Sprintf("simba: term %s#%d expired: %v", e.Name, e.Token, e.Reason)
	}
	return fmt.Sprintf("simba: term %s#%d expired: %v left, wanted more than %v", e.Name, e.Token, e.Remaining, e.Min)
}

// Is matches [ErrExpired].
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// Unwrap returns the reason the term ended, if it has.
func (e *ExpiredError) Unwrap() error {
	if e.Reason == 0 {
		return nil
	}
	return e.Reason
}
