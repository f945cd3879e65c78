package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// ErrNotAcquired is returned by TryAcquire when another session holds the
// lock (or, rarely, an earlier lock of this session whose release was lost
// on the way: that release is sent again, see TryAcquire).
var ErrNotAcquired = errors.New("simba: lock held by another session")

// ErrInvalidOption is wrapped by the error Acquire and TryAcquire return
// for an option they cannot run with (a negative lock-delay).
var ErrInvalidOption = errors.New("simba: invalid lock option")

// An Option configures one Acquire or TryAcquire.
type Option func(*options)

type options struct {
	lockDelay time.Duration
	err       error
}

// WithLockDelay asks the backend to keep the lock's name refused to every
// session for d after this lock's term ends without a release: its
// session expired, its local deadline passed, it was taken over (Chubby's
// and Consul's lock-delay). A holder that was paused (a GC, a frozen VM)
// and wakes up believing in the lock then finds nobody else at work on
// what it writes, for d: it protects resources that cannot check a
// fencing token. [Held.Close] releases the lease and skips the delay, and
// so does closing the session (at once: whatever still writes under the
// lock is then not covered). A release that cannot reach the backend
// before the session expires leaves the name to that expiry, and the
// delay (ADR 0275).
//
// The delay is enforced by the backend on its own clock, never by the
// candidates'; each backend honours delays up to its WithMaxLockDelay (0
// by default). Above that, Acquire and TryAcquire return an error
// wrapping session.ErrLockDelay at once (the session also publishes
// LockDelayRefused, logged at ERROR). A negative d is refused with
// ErrInvalidOption. Default 0: no delay. ADR 0240.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.err = errors.Join(o.err, fmt.Errorf("%w: WithLockDelay(%v): the lock-delay must not be negative", ErrInvalidOption, d))
			return
		}
		o.lockDelay = d
	}
}

// Held is a held lock: one term of the lock's name. Close it to release
// the lock in handover order.
//
// A lock is a claim on the session's engine of its own (package
// internal/layer), not an election: it takes one term, has no callbacks
// and no tasks, so it needs no listener queue, executor or handover wait
// (ADR 0161).
type Held struct {
	eng   layer.Engine
	c     layer.Claim
	name  string
	try   bool          // TryAcquire: the first refusal ends the wait
	delay time.Duration // WithLockDelay's

	// Set with the engine's lock held, before done is closed; read-only
	// afterwards.
	t       *term.Term // the term won
	refusal error      // why TryAcquire's attempt did not win (nil: the lease is held)
	refused bool
	closed  bool // the session closed during the wait

	// Guarded by the engine's lock.
	over            bool          // the wait is over: won, refused, the session closed, or given up
	done            chan struct{} // closed with over set: WaitRunning's stop
	closing         bool          // Close has started the handover
	releaseAnswered bool          // the backend has answered Close's release

	released sync.WaitGroup // Close's handover: done once the release has been answered
}

// handler is the engine's side of a Held: its methods are the layer's
// (layer.ClaimHandler, Refusals, Describer), not the lock's API, and run
// with the engine's lock held.
type handler Held

// Acquire blocks until the lock name is held by this session, or ctx ends,
// or the session closes (an error wrapping session.ErrClosed). It fails
// with an error wrapping session.ErrAlreadyStarted (election.ErrAlreadyStarted
// is the same value) if the same name is already locked or being acquired
// on this session.
func Acquire(ctx context.Context, s *session.Session, name string, opts ...Option) (*Held, error) {
	return acquire(ctx, s, name, false, opts)
}

// TryAcquire makes one attempt to acquire the lock and returns with
// ErrNotAcquired if the lease is held: by another session, or by an
// earlier lock of this session whose release did not reach the backend (it
// is released again at once, so a later attempt can win). Or with an error wrapping
// session.ErrQuarantined if the backend grants nothing for now because it
// lost its records (one maximum lease after the loss, ADR 0130). The attempt is made as soon
// as the session is LIVE (at once, normally; while it is SUSPENDED or
// OPENING, when it is LIVE again): ctx bounds that wait, and it fails with
// an error wrapping session.ErrClosed if the session closes first.
func TryAcquire(ctx context.Context, s *session.Session, name string, opts ...Option) (*Held, error) {
	return acquire(ctx, s, name, true, opts)
}

func acquire(ctx context.Context, s *session.Session, name string, try bool, opts []Option) (*Held, error) {
	if s == nil {
		return nil, fmt.Errorf("simba: lock %q: nil Session", name)
	}
	var o options
	if len(opts) > 0 {
		o = applyOptions(opts) // apart: options passed to unknown functions escape
	}
	if o.err != nil {
		return nil, fmt.Errorf("simba: lock %q: %w", name, o.err)
	}
	eng, ok := layer.Of(s)
	if !ok {
		return nil, fmt.Errorf("simba: lock %q: Session not built by session.New or session.Open", name)
	}
	h := &Held{eng: eng, name: name, try: try, delay: o.lockDelay, done: make(chan struct{})}
	c, err := eng.Claim(name, (*handler)(h))
	if err != nil {
		return nil, fmt.Errorf("simba: lock %q: %w", name, err)
	}
	h.c = c
	// The first attempt runs on this goroutine (DoWait): the caller waits
	// for it anyway, and the goroutine hops of a call of its own were most
	// of an uncontended lock's engine cost (issue 11, ADR 0121).
	eng.DoWaitRun(ctx, (*startStep)(h))
	select {
	case <-h.done: // won or refused by the first attempt: the usual case
	default:
		// Until the wait is over, the lock's later attempts (a release
		// notice's, a candidate tick's) run here: the new holder is the
		// goroutine that made the call, not one woken by it.
		eng.WaitRunning(ctx, name, h.done)
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		// Given up, unless the wait ended in the same breath: a term won
		// then is kept (the caller Closes it), a refusal reported.
		eng.Do(h.giveUp)
		if h.t == nil && !h.refused && !h.closed {
			return nil, fmt.Errorf("simba: lock %q: %w", name, context.Cause(ctx))
		}
	}
	switch {
	case h.t != nil:
		return h, nil
	case h.closed:
		return nil, fmt.Errorf("simba: lock %q: %w", name, session.ErrClosed)
	case h.refusal == nil:
		return nil, fmt.Errorf("%w: %q", ErrNotAcquired, name)
	case ctx.Err() != nil:
		// The attempt was given up because ctx ended (DoWait).
		return nil, fmt.Errorf("simba: lock %q: %w", name, context.Cause(ctx))
	default:
		return nil, fmt.Errorf("simba: lock %q: %w", name, h.refusal)
	}
}

// applyOptions returns the options opts set.
func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt == nil {
			o.err = errors.Join(o.err, fmt.Errorf("%w: a nil Option", ErrInvalidOption))
			continue
		}
		opt(&o)
	}
	return o
}

// startStep and closeStep are start and close as layer.Runners: a
// conversion, where the method values h.start and h.close were an
// allocation each per lock.
type (
	startStep    Held
	closeStep    Held
	answeredStep Held
)

func (x *startStep) Run()    { (*Held)(x).start() }
func (x *closeStep) Run()    { (*Held)(x).close() }
func (x *answeredStep) Run() { (*Held)(x).answered() }

// start competes for the lease: the first attempt leaves at once if the
// session is LIVE. Lock held.
func (h *Held) start() {
	if !h.over { // the session closed between Claim and now
		h.c.Want(true)
	}
}

// finish ends the wait. Lock held.
func (h *Held) finish() {
	h.over = true
	close(h.done)
}

// giveUp ends a wait that ctx ended: the claim is dropped, with an attempt
// in flight (its late grant is released by the engine, the claim being
// gone). A wait already over keeps its outcome. Lock held.
func (h *Held) giveUp() {
	if h.over {
		return
	}
	h.finish()
	h.c.Want(false)
	h.c.Drop()
}

// Won hands the term to the waiting caller: no delivery loop in between,
// so Acquire from a Direct-executor callback (which holds the loop up)
// returns. A win that comes after the wait is over is given back.
func (x *handler) Won(t *term.Term) {
	h := (*Held)(x)
	if h.over {
		h.c.Release(term.SteppedDown, nil)
		h.c.Drop()
		return
	}
	h.t = t
	h.c.Want(false) // one term: a lost lock is not acquired again by itself
	h.finish()
}

// Lost ends the lock for good when its term ends without Close: the name
// is released on the session (no release is needed: the lease is gone).
func (x *handler) Lost(t *term.Term, reason term.RevokeReason) {
	h := (*Held)(x)
	if t != h.t || reason == term.Stopped { // Stopped: the session is closing
		return
	}
	h.c.Drop()
}

// Closed ends a wait when the session closes.
func (x *handler) Closed() {
	h := (*Held)(x)
	if !h.over {
		h.closed = true
		h.finish()
	}
}

// LockDelay is the lock-delay the lock's attempts ask for (WithLockDelay).
func (x *handler) LockDelay() time.Duration { return x.delay }

// Refused ends TryAcquire's wait at the first attempt that did not win:
// the claim is dropped at once, so no later attempt (a release notice's)
// can win a lease nobody waits for. A refused lock-delay ends Acquire's
// wait too: the backend would refuse every attempt alike.
func (x *handler) Refused(err error) {
	h := (*Held)(x)
	if h.over || !h.try && !errors.Is(err, session.ErrLockDelay) {
		return
	}
	h.refused, h.refusal = true, err
	h.finish()
	h.c.Want(false)
	h.c.Drop()
}

// Describe names the lock in the session's Snapshot, with an election's
// status names: CANDIDATE while acquiring, LEADER while held.
func (x *handler) Describe() (kind, status string) {
	h := (*Held)(x)
	switch {
	case h.closing || h.over && h.t == nil:
		return "lock", "STOPPED"
	case h.t != nil:
		return "lock", "LEADER"
	default:
		return "lock", "CANDIDATE"
	}
}

// Name is the lock's name.
func (h *Held) Name() string { return h.t.Name() }

// Token is the term's fencing token.
func (h *Held) Token() uint64 { return h.t.Token() }

// Valid reports whether the lock is still held: not released, and the
// session's local deadline has not passed.
func (h *Held) Valid() bool { return h.t.Valid() }

// Remaining is the time until the session's local deadline, or zero once
// the lock is lost.
func (h *Held) Remaining() time.Duration { return h.t.Remaining() }

// EnsureValid returns an error matching term.ErrExpired unless the lock will
// stay held for more than min.
func (h *Held) EnsureValid(min time.Duration) error { return h.t.EnsureValid(min) }

// Term is the lock's term: its Context is cancelled when the lock is lost.
func (h *Held) Term() *term.Term { return h.t }

// Done is closed when the lock is lost or released.
func (h *Held) Done() <-chan struct{} { return h.t.Done() }

// Close releases the lock: the term is revoked (STOPPED), then the lease
// released with its token. It returns once the backend has answered the
// release (or the call failed, or timed out after one renewal period);
// until then the name stays taken on the session, so no new lock of it can
// overtake the release. Called from code on the session's delivery loop (a
// Direct executor's callback, one any executor runs inline, a session
// Listener; ADR 0183), it starts the release without waiting for it
// and returns ErrWouldBlockSelf (session.ErrWouldBlockSelf), as every
// blocking close does there. Safe to call more than once.
func (h *Held) Close() error {
	if h.eng.WouldWaitForSelf(context.Background(), h.c) {
		var answered bool
		h.eng.Do(func() {
			h.close()
			answered = h.releaseAnswered
		})
		if !answered {
			return session.ErrWouldBlockSelf
		}
		return nil
	}
	// The release runs on this goroutine (DoWait): Close waits for it anyway.
	h.eng.DoWaitRun(context.Background(), (*closeStep)(h))
	h.released.Wait()
	return nil
}

// close starts the handover, once. Lock held.
func (h *Held) close() {
	if h.closing {
		return // the first Close's release is under way: wait for it
	}
	h.closing = true
	h.released.Add(1)
	// Release revokes the term (STOPPED) before it sends the release
	// carrying the token; with no lease held (lost, the session closed)
	// it answers at once.
	h.c.ReleaseRun(term.Stopped, (*answeredStep)(h))
}

// answered completes Close once the backend has answered the release: the
// name is free on the session from then on. Lock held.
func (h *Held) answered() {
	h.c.Drop()
	h.releaseAnswered = true
	h.released.Done()
}
