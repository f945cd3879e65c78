package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/serial"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// Errors of the election API.
var (
	// ErrAlreadyStarted: an election (or lock) of that name is already
	// started on the session.
	ErrAlreadyStarted = session.ErrAlreadyStarted
	// ErrWouldBlockSelf: Stop, StepDown or Close was called from one of
	// the election's own callbacks or tasks (recognised by the term's
	// context, or for Close by the goroutine), or from code running on the
	// session's delivery loop (a Direct executor's callback, one any
	// executor runs inline, a session Listener; ADR 0183); the handover was
	// started but not waited for, since it waits for that very callback or
	// task. From another election's callback on a goroutine executor it
	// waits: that handover does not depend on the caller (ADR 0070).
	ErrWouldBlockSelf = session.ErrWouldBlockSelf
	// ErrStopped: StepDown was called on an election that is stopped or
	// being stopped.
	ErrStopped = errors.New("simba: election stopped")
	// ErrInvalidOption: Start was given an option it cannot run with (a nil
	// task, a schedule without a positive interval); the error says which.
	ErrInvalidOption = errors.New("simba: invalid election option")
)

// Status is an election's state, as Snapshot reports it.
type Status int

// The states of an election (docs/design.md §2):
//
//	STOPPED --Start--> CANDIDATE --won a term--> LEADER
//	LEADER --lost involuntarily--> CANDIDATE
//	LEADER or CANDIDATE --StepDown(cooldown)--> COOLDOWN --cooldown over--> CANDIDATE
//	any --Stop--> STOPPED
//	OnElected refused by the executor --> COOLDOWN for one lease duration
const (
	Stopped Status = iota
	Candidate
	Leader
	Cooldown
)

var statusNames = [...]string{"STOPPED", "CANDIDATE", "LEADER", "COOLDOWN"}

// String returns the status's name, such as "LEADER".
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText encodes the status as its name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Election competes for one lease name on a session and reports its terms
// to a Listener. Create it with [Start].
type Election struct {
	s        *session.Session
	eng      layer.Engine // the session's engine hooks
	c        layer.Claim
	name     string
	listener Listener
	queue    *serial.Queue
	tasks    []Task
	oneTerm  bool
	kind     string
	spawn    func(t *term.Term, task Task, done func())

	tasksMu sync.Mutex
	live    map[*liveTask]struct{} // tasks running, for Overrun

	// Guarded by the session's lock (session.Do).
	status    Status
	term      *term.Term
	ts        *termState // delivery state of term
	running   int        // tasks of term still running
	hand      *handover
	cooldown  func() bool
	stopping  chan struct{} // closed when Stop has completed
	onRefuse  func(error)
	onAttempt func(error)
	onWon     func(*term.Term)
	closed    bool // the session told the election it closed
	lockDelay time.Duration
	// delayErr is why the backend refused the election's lock-delay: the
	// election stopped (WithLockDelay).
	delayErr error
}

// termState tracks one term's callbacks: if the executor refused its
// OnElected, its OnRevoked is not delivered either, so callbacks stay paired.
type termState struct {
	t       *term.Term
	refused atomic.Bool
}

// handover is a voluntary end of a term in progress.
type handover struct {
	t      *term.Term
	reason term.RevokeReason
	bound  func() bool // the wait-for-tasks bound timer
	done   func()      // completes the handover (release, then OnRevoked, then finish)
	finish []func()    // run after OnRevoked is queued: what Stop/StepDown wait for
}

// Start starts an election for name on s: it becomes a CANDIDATE and
// attempts at once. It fails with ErrAlreadyStarted if name is already
// started on s, with an error wrapping deadline.ErrInvalidName for an
// invalid name, and with one wrapping ErrInvalidOption for an option it
// cannot run with (RunWhileLeader(nil)).
func Start(s *session.Session, name string, opts ...Option) (*Election, error) {
	if s == nil {
		return nil, errors.New("simba: start election: nil Session")
	}
	eng, ok := layer.Of(s)
	if !ok {
		return nil, errors.New("simba: start election: Session not built by session.New or session.Open")
	}
	o := options{exec: Goroutines{}, kind: "election"}
	for _, opt := range opts {
		if opt == nil {
			o.invalid("a nil Option")
			continue
		}
		opt(&o)
	}
	if o.err != nil {
		return nil, fmt.Errorf("simba: start election %q: %w", name, o.err)
	}
	quiet := o.listener == nil // no user code in callbacks: they need no marks
	if o.listener == nil {
		o.listener = Funcs{}
	}
	e := &Election{
		s:         s,
		eng:       eng,
		name:      name,
		listener:  o.listener,
		queue:     newQueue(eng, o.exec, quiet),
		tasks:     o.tasks,
		oneTerm:   o.oneTerm,
		kind:      o.kind,
		onRefuse:  o.onRefuse,
		onAttempt: o.onAttempt,
		onWon:     o.onWon,
		lockDelay: o.lockDelay,
	}
	e.spawn = e.goTask
	c, err := eng.Claim(name, handler{e})
	if err != nil {
		return nil, fmt.Errorf("simba: start election: %w", err)
	}
	e.c = c
	e.queue.SetOwner(c)
	closed := false
	start := func() {
		if closed = e.closed; closed {
			return // the session closed between Claim and now
		}
		e.status = Candidate
		c.Want(true)
	}
	var delayErr error
	if o.waitCtx != nil {
		eng.DoWait(o.waitCtx, start)
		eng.Do(func() { delayErr = e.delayErr })
	} else {
		eng.Do(start)
	}
	if closed {
		return nil, fmt.Errorf("simba: start election %q: %w", name, session.ErrClosed)
	}
	if delayErr != nil {
		return nil, fmt.Errorf("simba: start election %q: %w", name, delayErr)
	}
	return e, nil
}

// Name is the lease name the election competes for.
func (e *Election) Name() string { return e.name }

// Session is the session the election runs on.
func (e *Election) Session() *session.Session { return e.s }

// Status is the election's state.
func (e *Election) Status() Status {
	var st Status
	e.eng.Do(func() { st = e.status })
	return st
}

// Term is the current term, or nil when not leader. Check Valid before
// acting on it; pass its token to the resources you write.
func (e *Election) Term() *term.Term {
	var t *term.Term
	e.eng.Do(func() {
		if e.status == Leader {
			t = e.term
		}
	})
	return t
}

// handler receives the claim's news from the engine; its methods are the
// layer's, not the election's API (a user calling them would corrupt the
// election's state).
type handler struct{ e *Election }

func (h handler) Won(t *term.Term)                            { h.e.won(t) }
func (h handler) Lost(t *term.Term, reason term.RevokeReason) { h.e.lost(t, reason) }
func (h handler) Closed()                                     { h.e.sessionClosed() }
func (h handler) Refused(err error)                           { h.e.attemptRefused(err) }
func (h handler) LockDelay() time.Duration                    { return h.e.lockDelay }
func (h handler) Describe() (kind, status string)             { return h.e.kind, h.e.status.String() }

// attemptRefused is called by the session when an attempt did not win.
// A refused lock-delay stops the election: the backend would refuse every
// attempt alike, and a CANDIDATE that never competes would hide the
// configuration error (ADR 0240).
func (e *Election) attemptRefused(err error) {
	if e.onAttempt != nil {
		e.onAttempt(err)
	}
	if errors.Is(err, session.ErrLockDelay) && e.status == Candidate && e.stopping == nil {
		e.delayErr = err
		e.status = Stopped
		e.c.Want(false)
		e.c.Drop()
	}
}

// won is called by the session when a term begins.
func (e *Election) won(t *term.Term) {
	if e.status != Candidate || e.stopping != nil {
		// Not competing any more (a step-down raced the reply): give it back.
		e.c.Release(term.SteppedDown, nil)
		return
	}
	ts := &termState{t: t}
	if e.onWon != nil {
		e.onWon(t)
	}
	e.status = Leader
	e.term = t
	e.ts = ts
	e.running = 0
	e.eng.Defer(func() {
		e.queue.Push(func() {
			e.listener.OnElected(t)
			e.eng.Do(func() { e.startTasks(t) })
		}, func(err error) {
			ts.refused.Store(true)
			e.refused(t, err)
		})
	})
}

// refused handles an executor that refused OnElected: nobody learned of
// the term, so its task never starts and its OnRevoked is not delivered;
// the election steps down for one lease duration.
func (e *Election) refused(t *term.Term, err error) {
	e.eng.Do(func() {
		if e.onRefuse != nil {
			e.onRefuse(err)
		}
		if e.term != t || e.status != Leader {
			return
		}
		e.term = nil
		e.c.Release(term.SteppedDown, nil)
		if e.oneTerm { // single-term is terminal: no cooldown, no second term
			e.status = Stopped
			e.c.Drop()
			return
		}
		e.enterCooldown(e.s.Config().LeaseDuration)
	})
}

// lost is called by the session when a term ends involuntarily (or the
// session closed).
func (e *Election) lost(t *term.Term, reason term.RevokeReason) {
	if h := e.hand; h != nil && h.t == t {
		// A voluntary handover was waiting for the task: the lease is gone,
		// so there is nothing left to release.
		h.done()
		return
	}
	if e.term != t {
		return
	}
	e.term = nil
	e.revoked(e.ts, reason)
	switch {
	case reason == term.Stopped: // the session is closing; Closed follows
	case e.oneTerm:
		e.status = Stopped
		e.c.Drop()
	case e.status == Leader:
		e.status = Candidate
	}
}

// sessionClosed is called by the session when it closes: the election is
// over.
func (e *Election) sessionClosed() {
	e.closed = true
	e.stopCooldown()
	e.status = Stopped
	e.term = nil
}

// revoked queues OnRevoked for a term, unless its OnElected was refused.
// Lock held.
//
// An executor that accepted OnElected and refuses its OnRevoked would leave
// the listener believing it still leads: the refused OnRevoked is run
// instead on the goroutine delivering it (as with Direct), in its place in
// the queue, so callbacks stay paired and ordered.
func (e *Election) revoked(ts *termState, reason term.RevokeReason) {
	run := func() {
		if !ts.refused.Load() {
			e.listener.OnRevoked(ts.t, reason)
		}
	}
	e.eng.Defer(func() {
		e.queue.PushMustRun(run)
	})
}

// Stop ends the election: the term, if any, is revoked with STOPPED; the
// lease is kept until the election's tasks have returned or the session's
// local deadline passes, whichever is first; then it is released and
// OnRevoked delivered. Stop waits for all that, or for ctx. Called from the
// election's own callback or task, it does not wait and returns
// ErrWouldBlockSelf. Nothing is delivered to the listener once Stop has
// completed.
func (e *Election) Stop(ctx context.Context) error {
	return e.wait(ctx, e.stop(ctx))
}

// Close is Stop without a deadline, for io.Closer.
func (e *Election) Close() error { return e.Stop(context.Background()) }

// StepDown gives up the current term (revoked with STEPPED_DOWN, in the
// same handover order as Stop) and stops competing for cooldown, counted
// from now; then the election is a CANDIDATE again. Use it to move
// leadership off a node before a deploy. It waits for the handover like
// Stop. On an election that is stopped or stopping (also a single-term
// election whose term ended, or one whose session closed), it waits for
// the stop to complete and returns ErrStopped.
func (e *Election) StepDown(ctx context.Context, cooldown time.Duration) error {
	done, stopped := e.stepDown(cooldown)
	if err := e.wait(ctx, done); err != nil {
		return err
	}
	if stopped {
		return fmt.Errorf("simba: step down %q: %w", e.name, ErrStopped)
	}
	return nil
}

func (e *Election) wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	if e.eng.WouldWaitForSelf(ctx, e.c) {
		return ErrWouldBlockSelf
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("simba: waiting for the handover of %q: %w", e.name, context.Cause(ctx))
	}
}

// stop starts the stop and returns a channel closed when it completes.
// A caller that will wait for it without bound (Close, Stop without a
// deadline) and is not what the handover waits for runs the release on
// its own goroutine (DoWait): it would wait for it anyway. A Stop with a
// deadline hands the release to a goroutine, which goes on after the
// deadline.
func (e *Election) stop(ctx context.Context) <-chan struct{} {
	var ch chan struct{}
	do := e.eng.Do
	if ctx.Done() == nil && !e.eng.WouldWaitForSelf(ctx, e.c) {
		do = func(f func()) { e.eng.DoWait(ctx, f) }
	}
	do(func() {
		if e.stopping != nil {
			ch = e.stopping
			return
		}
		ch = make(chan struct{})
		e.stopping = ch
		e.stopCooldown()
		e.status = Stopped
		e.c.Want(false)
		finish := func() {
			e.c.Drop()
			e.eng.Defer(func() {
				e.queue.WhenIdle(func() {
					e.queue.Close()
					close(ch)
				})
			})
		}
		if !e.handOver(term.Stopped, finish) {
			finish()
		}
	})
	return ch
}

func (e *Election) stepDown(cooldown time.Duration) (done <-chan struct{}, stopped bool) {
	ch := make(chan struct{})
	done = ch
	e.eng.Do(func() {
		if e.stopping != nil {
			// Complete with the stop, which may still be delivering
			// OnRevoked.
			done, stopped = e.stopping, true
			return
		}
		if e.status == Stopped {
			// Over without Stop (a single term that ended, a closed
			// session): a cooldown would end in a CANDIDATE that never
			// competes.
			close(ch)
			stopped = true
			return
		}
		finish := func() {
			e.eng.Defer(func() { e.queue.WhenIdle(func() { close(ch) }) })
		}
		if e.oneTerm {
			// Single-term is terminal: the term handed over, the name is
			// released for good, with no cooldown to come back from.
			e.status = Stopped
			e.c.Want(false)
			end := finish
			finish = func() { e.c.Drop(); end() }
		} else {
			e.enterCooldown(cooldown)
		}
		if !e.handOver(term.SteppedDown, finish) {
			finish()
		}
	})
	return done, stopped
}

// handOver revokes the current term for a voluntary reason and releases
// its lease once its tasks have returned or the session's local deadline
// passes, then delivers OnRevoked and calls finish. It reports false if
// there was no term. Lock held.
func (e *Election) handOver(reason term.RevokeReason, finish func()) bool {
	t := e.term
	if t == nil {
		if h := e.hand; h != nil {
			// A handover is under way: complete with it.
			h.finish = append(h.finish, finish)
			return true
		}
		return false
	}
	bound := t.Remaining() // the term's remaining time: the most a task may delay the handover
	ts := e.ts
	e.term = nil
	e.c.Revoke(reason)
	h := &handover{t: t, reason: reason, finish: []func(){finish}}
	e.hand = h
	completed := false
	h.done = func() {
		if completed {
			return
		}
		completed = true
		if h.bound != nil {
			h.bound()
		}
		after := func() {
			e.hand = nil
			e.revoked(ts, reason)
			for _, f := range h.finish {
				f()
			}
			if e.status == Candidate && e.stopping == nil {
				e.c.Want(true) // a cooldown ended during the handover
			}
		}
		if e.c.Term() == t {
			e.c.Release(reason, after)
		} else {
			after() // the lease is gone already
		}
	}
	if e.running == 0 || bound <= 0 {
		h.done()
		return true
	}
	h.bound = e.eng.AfterFunc(bound, func() { e.eng.Do(h.done) })
	return true
}

func (e *Election) enterCooldown(d time.Duration) {
	e.stopCooldown()
	e.status = Cooldown
	e.c.Want(false)
	e.cooldown = e.eng.AfterFunc(d, func() {
		e.eng.Do(func() {
			if e.status != Cooldown {
				return
			}
			e.cooldown = nil
			e.status = Candidate
			// Compete again, but not before a handover under way has
			// delivered OnRevoked: callbacks stay paired and ordered.
			if e.hand == nil {
				e.c.Want(true)
			}
		})
	})
}

func (e *Election) stopCooldown() {
	if e.cooldown != nil {
		e.cooldown()
		e.cooldown = nil
	}
}

// startTasks starts the election's tasks for t, unless t has already
// ended. Lock held.
func (e *Election) startTasks(t *term.Term) {
	if e.term != t || !t.Valid() {
		return
	}
	for _, task := range e.tasks {
		e.running++
		e.spawn(t, task, func() {
			e.eng.Do(func() {
				if e.term == t || e.hand != nil && e.hand.t == t {
					e.running--
					if e.running == 0 && e.hand != nil && e.hand.t == t {
						e.hand.done()
					}
				}
			})
		})
	}
}

// goTask runs a task on a session goroutine under the term's context.
func (e *Election) goTask(t *term.Term, task Task, done func()) {
	lt := &liveTask{}
	e.tasksMu.Lock()
	if e.live == nil {
		e.live = make(map[*liveTask]struct{})
	}
	e.live[lt] = struct{}{}
	e.tasksMu.Unlock()
	eng := e.eng
	stopWatch := context.AfterFunc(t.Context(), func() {
		e.tasksMu.Lock()
		lt.ended = eng.Now()
		e.tasksMu.Unlock()
	})
	e.eng.Go(e.c, func() {
		defer done()
		defer func() {
			stopWatch()
			e.tasksMu.Lock()
			delete(e.live, lt)
			e.tasksMu.Unlock()
		}()
		_ = task(t.Context(), t)
	})
}

// liveTask is a running task; ended is when its term ended (zero while
// the term lasts).
type liveTask struct{ ended time.Time }

// Overrun is how long the election's longest-overrunning task has been
// running since its term ended, or 0 if every running task's term is still
// on. A task must return soon after its term's context is cancelled: one
// that runs on may act without being leader, which a health check reports
// (package election/health).
func (e *Election) Overrun() time.Duration {
	now := e.eng.Now()
	e.tasksMu.Lock()
	defer e.tasksMu.Unlock()
	var longest time.Duration
	for lt := range e.live {
		if !lt.ended.IsZero() {
			longest = max(longest, now.Sub(lt.ended))
		}
	}
	return longest
}
