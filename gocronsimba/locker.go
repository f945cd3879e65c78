package gocronsimba

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
)

// ErrNoLock is returned by a task wrapped with [SessionLocker.Task] when
// the Locker holds no lock for the job: the task was not run through this
// Locker, or under another job name than the one given to Task.
var ErrNoLock = errors.New("gocronsimba: no lock held for the job")

// ErrRunning is returned by Lock when the same Locker already runs the job:
// gocron skips the overlapping run.
var ErrRunning = errors.New("gocronsimba: the job is already running on this scheduler")

// SessionLocker is a gocron.Locker that takes one Simba lock per run. It
// is safe for concurrent use. Close it before the session.
type SessionLocker struct {
	s    *session.Session
	opts options

	mu     sync.Mutex
	held   map[string]*runLock // by job name: the run's lock, or one lingering for HoldAtLeast
	closed bool
}

type runLock struct {
	l       *SessionLocker
	key     string
	h       *lock.Held
	since   time.Time     // when the lock was acquired (for HoldAtLeast)
	running bool          // a run holds it
	linger  *time.Timer   // HoldAtLeast's pending release, when not running
	gone    chan struct{} // set when its release starts, closed when it has ended
}

// Locker returns a gocron.Locker taking, for each run of a job, the lock
// named [WithPrefix] + the job's name on s. Pass it to
// gocron.WithDistributedLocker. The job's name is gocron's key: give each
// job a name with gocron.WithName that makes a valid lease name (gocron's
// default, the function's import path, has '/' and is refused with the
// rule).
func Locker(s *session.Session, opts ...Option) *SessionLocker {
	return &SessionLocker{s: s, opts: collect(opts), held: map[string]*runLock{}}
}

// Lock implements gocron.Locker: it takes the job's lock with one attempt
// (lock.TryAcquire, bounded by [LockWait]) and fails, so that gocron skips
// the run, when another scheduler holds it, the session cannot take it,
// or the name is not a valid lease name.
func (l *SessionLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if l == nil || l.s == nil {
		return nil, errors.New("gocronsimba: gocronsimba.Locker was given a nil *session.Session")
	}
	name := l.opts.prefix + key
	if err := deadline.ValidateName(name); err != nil {
		return nil, fmt.Errorf("gocronsimba: job %q: lock name (prefix %q + job name): %w (name the job with gocron.WithName)", key, l.opts.prefix, err)
	}
	wctx, cancel := context.WithTimeout(ctx, l.opts.lockWait)
	defer cancel()
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return nil, fmt.Errorf("gocronsimba: job %q: %w", key, session.ErrClosed)
		}
		r := l.held[key]
		if r == nil {
			break
		}
		if r.gone != nil {
			// The previous run's release is under way: the session holds
			// the name until it is answered, and would refuse it.
			gone := r.gone
			l.mu.Unlock()
			select {
			case <-gone:
			case <-wctx.Done():
				return nil, fmt.Errorf("gocronsimba: job %q: waiting for the previous run's release: %w", key, context.Cause(wctx))
			}
			l.mu.Lock()
			continue
		}
		if r.running {
			l.mu.Unlock()
			return nil, fmt.Errorf("%w: %q", ErrRunning, key)
		}
		// A lock lingering for HoldAtLeast: reuse its term if it will last.
		r.linger.Stop()
		r.linger = nil
		if r.h.EnsureValid(l.opts.minValidity) == nil {
			r.running = true
			l.mu.Unlock()
			return r, nil
		}
		l.startRelease(r)
		l.mu.Unlock()
		_ = l.finishRelease(r)
		l.mu.Lock()
	}
	// Reserve the key so an overlapping run of this scheduler is refused
	// without asking the backend.
	r := &runLock{l: l, key: key, running: true}
	l.held[key] = r
	l.mu.Unlock()

	h, err := lock.TryAcquire(wctx, l.s, name)
	if err == nil {
		if err = h.EnsureValid(l.opts.minValidity); err != nil {
			_ = h.Close()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.held[key] == r {
			delete(l.held, key)
		}
		return nil, fmt.Errorf("gocronsimba: job %q: %w", key, err)
	}
	if l.closed { // Close ran during the attempt
		if l.held[key] == r {
			delete(l.held, key)
		}
		go func() { _ = h.Close() }()
		return nil, fmt.Errorf("gocronsimba: job %q: %w", key, session.ErrClosed)
	}
	r.h, r.since = h, time.Now()
	return r, nil
}

// startRelease marks r as being released. It keeps its place in held
// until finishRelease, so that a Lock of the same job waits for the
// release instead of being refused by the session, which still holds the
// name. Lock held.
func (l *SessionLocker) startRelease(r *runLock) {
	r.running = false
	if r.linger != nil {
		r.linger.Stop()
		r.linger = nil
	}
	r.gone = make(chan struct{})
}

// finishRelease releases r's lock and removes r. Lock not held.
func (l *SessionLocker) finishRelease(r *runLock) error {
	var err error
	if r.h != nil {
		err = r.h.Close()
	}
	l.mu.Lock()
	if l.held[r.key] == r {
		delete(l.held, r.key)
	}
	close(r.gone)
	l.mu.Unlock()
	return err
}

// Unlock implements gocron.Lock: it releases the run's lock, or with
// [HoldAtLeast] schedules the release for when the hold is over.
func (r *runLock) Unlock(context.Context) error {
	l := r.l
	l.mu.Lock()
	if !r.running || l.held[r.key] != r {
		l.mu.Unlock()
		return nil // released already (Close)
	}
	r.running = false
	if rest := l.opts.holdAtLeast - time.Since(r.since); rest > 0 && !l.closed && r.h.Valid() {
		r.linger = time.AfterFunc(rest, func() { l.release(r) })
		l.mu.Unlock()
		return nil
	}
	l.startRelease(r)
	l.mu.Unlock()
	return l.finishRelease(r)
}

// release ends a lingering lock whose hold is over, unless a run took it
// again meanwhile.
func (l *SessionLocker) release(r *runLock) {
	l.mu.Lock()
	if r.running || l.held[r.key] != r || r.linger == nil || r.gone != nil {
		l.mu.Unlock()
		return
	}
	l.startRelease(r)
	l.mu.Unlock()
	_ = l.finishRelease(r)
}

// Task wraps fn for gocron.NewTask on the job named key (the name given
// with gocron.WithName): each run gets the term of the lock the Locker
// took for it, and a context that ends when the job's context or that term
// ends. Without such a lock (the job does not use this Locker, or key is
// not its name) the run fails with [ErrNoLock].
func (l *SessionLocker) Task(key string, fn election.Task) func(context.Context) error {
	return func(ctx context.Context) error {
		l.mu.Lock()
		r := l.held[key]
		var h *lock.Held
		if r != nil && r.running {
			h = r.h
		}
		l.mu.Unlock()
		if h == nil {
			return fmt.Errorf("%w: %q", ErrNoLock, key)
		}
		if err := h.EnsureValid(0); err != nil {
			return err
		}
		return runUnder(ctx, h.Term(), fn)
	}
}

// Close releases every lock the Locker still holds (runs in progress lose
// theirs: their wrapped tasks' contexts end), waits for releases already
// under way, and makes later Locks fail. It does not close the session.
func (l *SessionLocker) Close() error {
	l.mu.Lock()
	l.closed = true
	var mine []*runLock
	var under []chan struct{}
	for k, r := range l.held {
		switch {
		case r.gone != nil:
			under = append(under, r.gone)
		case r.h == nil:
			delete(l.held, k) // a Lock's attempt in flight: it closes what it wins
		default:
			l.startRelease(r)
			mine = append(mine, r)
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, r := range mine {
		if err := l.finishRelease(r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range under {
		<-c
	}
	return errors.Join(errs...)
}
