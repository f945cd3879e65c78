// Package layer holds the engine hooks that Simba's own layers (election,
// lock, group) build on: claims on lease names, the engine's lock and its
// ordered delivery of effects, the goroutines Close waits for. An
// application must not call them (a user who could call a hook could break
// the engine's state), so they live under github.com/simba-go/simba/internal:
// Go lets every github.com/simba-go/simba/... package import it, and
// nothing else. docs/adr/0060-audiences.md explains the split.
//
// The engine stays in package session. A *session.Session embeds a [Link];
// [Of] finds the session's [Engine] through it. The link's only method is
// unexported, so no type outside this package can fake one, and the
// session's user API shows none of the hooks.
package layer

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/term"
)

// ClaimHandler receives what happens to a [Claim]'s leases. Its methods run
// with the engine's lock held, in the order things happen: they must not
// block, and may only change engine state through the Claim's methods and
// [Engine.Defer] (to run user callbacks after the lock is released).
type ClaimHandler interface {
	// Won reports a new term.
	Won(t *term.Term)
	// Lost reports that the lease of t is gone without the claim asking:
	// DEADLINE_PASSED, SESSION_EXPIRED, TAKEN_OVER, or STOPPED when the
	// session closed. No release is needed. t may already have been revoked
	// by the claim (a voluntary handover still waiting for its task); the
	// handover then ends without a release.
	Lost(t *term.Term, reason term.RevokeReason)
	// Closed reports that the session closed: the claim is over.
	Closed()
}

// Refusals is implemented by a ClaimHandler that wants to know when an
// attempt of the claim did not win (a lock's TryAcquire): err is nil when
// the lease is held (by another session, or by an earlier lease of this
// one that is being released again: "already yours" under a token this
// session released), else why the attempt failed. Every attempt is
// answered: by Won or by Refused. Refused runs with the engine's lock held.
type Refusals interface {
	Refused(err error)
}

// LockDelayer is implemented by a ClaimHandler whose terms ask the backend
// for a lock-delay (election.WithLockDelay, lock.WithLockDelay): after a
// term that ends without a release, the backend refuses the name to every
// session for that long (driver.AcquireRequest.LockDelay, ADR 0240). The
// session reads it once, when the claim is registered: one Acquire carries
// one delay, so claims with different delays go in separate calls. An
// attempt the backend refuses for its delay (an error wrapping
// session.ErrLockDelay: above the backend's WithMaxLockDelay) is answered
// through Refusals, and the claim stops competing: the backend would refuse
// every later attempt alike.
type LockDelayer interface {
	LockDelay() time.Duration
}

// Describer is implemented by a ClaimHandler that reports itself in the
// session's Snapshot. Describe runs with the engine's lock held.
type Describer interface {
	Describe() (kind, status string)
}

// Claim is a lease name registered on a session for one user (an election,
// a lock, a partition of a group). While it wants the lease, the session
// attempts to acquire it at once, on every candidate tick and on every
// release notice, batching the attempts of all claims into one backend
// call; it reports terms won and lost to the handler.
//
// Claim methods must be called with the engine's lock held: inside
// [Engine.Do] or a ClaimHandler method.
type Claim interface {
	// Name is the claimed lease name.
	Name() string
	// Want starts (true) or stops (false) competing for the lease.
	// Starting attempts at once. Stopping does not give up a lease already
	// held: use Revoke and Release.
	Want(want bool)
	// Term is the current term, or nil. It may already be revoked while a
	// voluntary handover waits to release its lease.
	Term() *term.Term
	// Revoke ends the current term for a voluntary reason (Stopped or
	// SteppedDown) and keeps its lease until Release: the first step of the
	// handover order. It returns the term, or nil if none is held.
	Revoke(reason term.RevokeReason) *term.Term
	// Release gives the current term's lease back, carrying its token,
	// after revoking the term if it was not already. done, if not nil, runs
	// with the lock held when the backend has answered (or the call failed,
	// or the session ended, or at once if no lease is held). It reports
	// whether a release was sent.
	Release(reason term.RevokeReason, done func()) bool
	// ReleaseRun is Release with done.Run as done, without the allocation
	// of a method value (a lock's Close).
	ReleaseRun(reason term.RevokeReason, done Runner) bool
	// Drop unregisters the claim, releasing its lease if one is held. The
	// name can be claimed again afterwards.
	Drop()
	// SetOwner makes key (a group of claims, for instance) the owner of the
	// claim's callbacks and tasks for the self-wait rule
	// (Engine.WouldWaitForSelf): a term's context then names key. By
	// default a claim owns its own. Call it before the claim wins a term.
	SetOwner(key any)
	// PaceNotices lets the claim's release notices wait for a batch: the
	// session answers a paced claim's notice at once when no paced notice
	// was answered in the last half renewal interval (the shortest
	// candidate tick), else at the end of that window, together with every
	// paced notice that arrived in it, in one Acquire. For claims whose
	// notices come in streams (a group's partitions during a rebalance);
	// an election's notices stay unpaced, answered at once. ADR 0102.
	PaceNotices()
}

// Engine is the hook side of one session.
type Engine interface {
	// Claim registers name for h. It fails with an error wrapping
	// deadline.ErrInvalidName for an invalid name, session.ErrAlreadyStarted
	// if the name is already claimed on the session, and session.ErrClosed
	// after Close. It takes the engine's lock: call it outside Do.
	Claim(name string, h ClaimHandler) (Claim, error)
	// Do runs f with the engine's lock held, then runs what f deferred. f
	// must not block.
	Do(f func())
	// DoWait is Do for a caller that waits for what f starts (a lock's
	// first attempt, a release it waits for): the first backend call f
	// makes may run on the caller's goroutine, reply included, before
	// DoWait returns. ctx bounds that: when it ends first, the call is
	// given up as if it had timed out. The caller must not hold anything
	// the backend call needs.
	DoWait(ctx context.Context, f func())
	// DoWaitRun is DoWait(ctx, r.Run) without the allocation of a method
	// value: a lock's acquire and Close pass a pointer of a named type of
	// theirs, which becomes a Runner for free.
	DoWaitRun(ctx context.Context, r Runner)
	// WaitRunning blocks until stop is closed, ctx ends or the session
	// closes, and meanwhile runs on the calling goroutine the backend
	// calls that attempt the claim of name alone (a release notice's, a
	// candidate tick's), saving the hop from the call's goroutine to the
	// caller. stop must be closed with the engine's lock held, when the
	// caller's wait is over; while it is open the claim of name must be
	// the caller's. ctx gives up a call it runs, as DoWait's.
	WaitRunning(ctx context.Context, name string, stop <-chan struct{})
	// Defer runs f after the engine's lock is released, after everything
	// deferred before it. Lock held.
	Defer(f func())
	// Go runs f, a leader task of owner (a claim or a claim's owner key;
	// nil: the whole session's), on a goroutine of the session's Env,
	// counted by Close and recognised as owner's (so that blocking calls
	// made from f do not wait for f).
	Go(owner any, f func())
	// Hold makes Close wait until release is called (unless Close is called
	// from the session's own callbacks or tasks).
	Hold() (release func())
	// Inside runs f, a user callback of owner (a claim or a claim's owner
	// key; nil: the whole session's), marked as such: blocking calls made
	// from f without a context do not wait for work that f itself delays.
	// loop says f runs on the delivery loop (a Direct executor).
	Inside(owner any, loop bool, f func())
	// WouldWaitForSelf reports whether a wait for owner's handovers (owner:
	// a claim or a claim's owner key; nil: the whole session) would wait
	// for the caller itself: ctx was handed out for a term of owner, or the
	// calling goroutine runs owner's callback or task, or a callback on the
	// delivery loop. Blocking calls use it to avoid deadlocking on
	// themselves.
	WouldWaitForSelf(ctx context.Context, owner any) bool
	// AfterFunc runs f once, d from now, on the session's clock (virtual
	// time under a simulated Env), unless stop is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
	// Now reads the session's clock.
	Now() time.Time
	// LiveSince reports whether the session is LIVE (its renewals work)
	// and since when, on its clock: a group tells a member that cannot
	// see the group from a backend that is down for every call (ADR
	// 0226). Lock held.
	LiveSince() (since time.Time, live bool)
	// Jitter returns a random number in [0, 1) from the session's Env.
	Jitter() float64
	// WantAll is Want(true) for every claim of cs (all registered on this
	// session), with their attempts in one backend call. Lock held.
	WantAll(cs []Claim)
	// Call runs op through the session's Env with a timeout of one renewal
	// period (the backend calls a layer makes itself, such as a group's
	// inspection), then reply with the lock held: with op's results, with
	// context.DeadlineExceeded if the timeout came first (op's results are
	// then never read), or at once with session.ErrClosed after Close.
	// Close waits for it. Lock held.
	Call(op func(ctx context.Context) (any, error), reply func(v any, err error))
}

// Link ties a session to its Engine. A session embeds it (by value); only
// this package can read it.
type Link struct{ e Engine }

func (l *Link) link() *Link { return l }

// linked is implemented only by types embedding a Link: its method is
// unexported, so no other package can declare it.
type linked interface{ link() *Link }

// Bind makes e the Engine that [Of] finds through l. The session calls it
// once, when it is built.
func Bind(l *Link, e Engine) { l.e = e }

// Of returns the Engine of s, a *session.Session, or false if s is not one
// (or nil, or not built by session.New).
func Of(s any) (Engine, bool) {
	x, ok := s.(linked)
	if !ok || x == nil {
		return nil, false
	}
	l := x.link()
	if l == nil || l.e == nil {
		return nil, false
	}
	return l.e, true
}

// A Runner is a step DoWaitRun runs with the engine's lock held.
type Runner interface{ Run() }

// contextKey marks the contexts a session hands out (a term's context).
type contextKey struct{}

// WithEngine returns a context derived from parent that [FromContext]
// recognises as handed out by e's session.
func WithEngine(parent context.Context, e Engine) context.Context {
	return context.WithValue(parent, contextKey{}, e)
}

// WithEngineValue is WithEngine(context.WithValue(parent, key, val), e) in
// one allocation instead of two: every term's context is made so.
func WithEngineValue(parent context.Context, e Engine, key, val any) context.Context {
	return &engineValueCtx{Context: parent, e: e, key: key, val: val}
}

type engineValueCtx struct {
	context.Context
	e        Engine
	key, val any
}

func (c *engineValueCtx) Value(key any) any {
	switch {
	case key == contextKey{}:
		return c.e
	case key == c.key:
		return c.val
	}
	return c.Context.Value(key)
}

// FromContext returns the Engine of the session that handed out ctx (a
// term's context or one derived from it), or false.
func FromContext(ctx context.Context) (Engine, bool) {
	if ctx == nil {
		return nil, false
	}
	e, ok := ctx.Value(contextKey{}).(Engine)
	return e, ok
}

// MustOf is [Of] for code that knows s is a session built by session.New
// (tests): it panics otherwise.
func MustOf(s any) Engine {
	e, ok := Of(s)
	if !ok {
		panic(fmt.Sprintf("layer.MustOf: %T is not a session built by session.New", s))
	}
	return e
}
