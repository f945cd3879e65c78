package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// ErrNotAcquired is returned by TryAcquire when another session holds the
// lock.
var ErrNotAcquired = errors.New("simba: lock held by another session")

// Held is a held lock: one term of the lock's name. Close it to release
// the lock in handover order.
type Held struct {
	e *election.Election
	t *term.Term
}

// Acquire blocks until the lock name is held by this session, or ctx ends,
// or the session closes (an error wrapping session.ErrClosed). It fails
// with an error wrapping election.ErrAlreadyStarted if the same name is
// already locked or being acquired on this session.
func Acquire(ctx context.Context, s *session.Session, name string) (*Held, error) {
	return acquire(ctx, s, name, false)
}

// TryAcquire makes one attempt to acquire the lock and returns with
// ErrNotAcquired if another session holds it, or with an error wrapping
// session.ErrQuarantined if the backend grants nothing for now because it
// lost its records (one maximum lease after the loss, ADR 0130). The attempt is made as soon
// as the session is LIVE (at once, normally; while it is SUSPENDED or
// OPENING, when it is LIVE again): ctx bounds that wait, and it fails with
// an error wrapping session.ErrClosed if the session closes first.
func TryAcquire(ctx context.Context, s *session.Session, name string) (*Held, error) {
	return acquire(ctx, s, name, true)
}

// waiter receives the lock's first term or the first refusal.
type waiter struct {
	once     sync.Once
	won      chan *term.Term
	err      chan error
	doneOnce sync.Once
	done     chan struct{} // closed with the engine's lock held once won or refused: the wait is over
}

// win hands over the first term; it runs with the engine's lock held (a
// buffered send that never blocks), not on the delivery loop, so Acquire
// from a Direct-executor callback (which holds the loop up) still returns.
func (w *waiter) win(t *term.Term) {
	w.once.Do(func() { w.won <- t })
	w.finish()
}

func (w *waiter) finish() { w.doneOnce.Do(func() { close(w.done) }) }

func acquire(ctx context.Context, s *session.Session, name string, try bool) (*Held, error) {
	w := &waiter{won: make(chan *term.Term, 1), err: make(chan error, 1), done: make(chan struct{})}
	// The first attempt runs on this goroutine (WaitFirstAttempt): the
	// caller waits for it anyway, and the goroutine hops of a call of its
	// own were most of an uncontended lock's engine cost (issue 11).
	opts := []election.Option{election.SingleTerm("lock"), election.OnWon(w.win), election.WithExecutor(election.Direct{}), election.WaitFirstAttempt(ctx)}
	if try {
		opts = append(opts, election.OnAttempt(func(err error) {
			select {
			case w.err <- err:
			default:
			}
			w.finish()
		}))
	}
	e, err := election.Start(s, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("simba: lock %q: %w", name, err)
	}
	if eng, ok := layer.Of(s); ok {
		// Until the wait is over, the lock's later attempts (a release
		// notice's, a candidate tick's) run here: the new holder is the
		// goroutine that made the call, not one woken by it.
		eng.WaitRunning(ctx, name, w.done)
	}
	select {
	case t := <-w.won:
		return &Held{e: e, t: t}, nil
	case err := <-w.err:
		_ = e.Stop(context.Background())
		select {
		case t := <-w.won: // won in the same breath: keep it
			if t.Valid() {
				return &Held{e: e, t: t}, nil
			}
		default:
		}
		if err == nil {
			return nil, fmt.Errorf("%w: %q", ErrNotAcquired, name)
		}
		if ctx.Err() != nil {
			// The attempt was given up because ctx ended (WaitFirstAttempt).
			return nil, fmt.Errorf("simba: lock %q: %w", name, context.Cause(ctx))
		}
		return nil, fmt.Errorf("simba: lock %q: %w", name, err)
	case <-ctx.Done():
		_ = e.Stop(context.Background())
		return nil, fmt.Errorf("simba: lock %q: %w", name, context.Cause(ctx))
	case <-s.Done():
		// The session closed while waiting: nothing can be won on it any
		// more, so waiting on would last until ctx ends, maybe forever.
		return nil, fmt.Errorf("simba: lock %q: %w", name, session.ErrClosed)
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
// released with its token. Safe to call more than once.
func (h *Held) Close() error { return h.e.Close() }
