package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Errors of the session API.
var (
	// ErrWouldBlockSelf: a blocking call was made from a callback or a
	// leader task of the object it would wait for. The call started what it
	// was asked to do and returned at once instead of deadlocking.
	ErrWouldBlockSelf = errors.New("simba: would wait for itself (called from a callback or leader task)")
	// ErrAlreadyStarted: the name is already claimed on this session.
	ErrAlreadyStarted = errors.New("simba: name already started on this session")
	// ErrContractViolation: a backend reply broke the SPI's contract. The
	// engine treats it as a failed call and publishes
	// BackendContractViolation.
	ErrContractViolation = errors.New("simba: backend reply breaks the contract")
)

// Session is a node's one session on a backend: its liveness, renewed by one
// backend call every renewal period whatever the number of leases it holds.
// Every lease the node holds lives and ends with it. When the backend
// session expires or its local deadline passes, the Session opens a new
// backend session (a new ID) and its elections compete from scratch: a
// session never comes back to life.
//
// A Session is safe for concurrent use. Close it to release every lease.
type Session struct {
	link // how Simba's own layers find the engine hooks (package internal/layer)

	cfg       deadline.Config
	owner     Owner
	b         Backend
	env       Env
	log       *slog.Logger // the event log, nil when off
	listeners []Listener
	termCtx   func(context.Context, Event) context.Context
	warn      time.Duration // WithDeadlineWarning's margin; zero: none
	root      context.Context
	cancel    context.CancelFunc
	inside    goroutines // goroutines running user callbacks and tasks (for calls without a context)
	callsHere bool       // the Env runs backend calls as plain goroutines, so doWait may run one itself
	wg        counter
	ready     chan struct{} // closed when the first backend session is open
	closed    chan struct{}

	mu          sync.Mutex
	state       State
	since       time.Time // when state last changed, on the Env's clock
	inc         *incarnation
	renewEvery  time.Duration
	seq         uint64
	anyQueued   bool   // some claim is queued (claim.queue): pumpAcquire has work
	heldGen     uint64 // moves whenever a claim's held lease changes (claim.setHeld)
	claims      map[string]*claim
	tokens      map[string]uint64 // highest token of any term made per name: a later term's must exceed it
	retiring    forgetting        // bounds tokens and the incarnations' released (ADR 0295)
	order       []*claim          // claims in registration order, for deterministic batches; dropped ones until compactOrder
	dropped     int               // dropped claims still in order
	openFails   int
	quarantined bool   // the latest Acquire's reply announced a quarantine (BackendQuarantined published)
	lastAcquire uint64 // the attempt of the latest Acquire sent
	acquiring   bool
	holdPump    bool // WantAll is queueing claims: one Acquire when it is done
	releasing   bool
	releaseQ    []pendingRelease
	candidate   timer
	noticeUntil time.Time // paced notices until then wait for noticeT (Session.notice)
	noticeT     timer     // answers the paced notices of the window
	noticed     []*claim  // paced claims whose notice waits for noticeT
	openRetry   timer     // the next Open after a failed one
	effects     []func()
	draining    bool
	effectsHeld bool // effects are pending: the delivery loop holds wg until it has run them all
	unsub       func()
	started     bool        // Start has subscribed and opened
	startMu     sync.Mutex  // serialises Start (its Subscribe runs without mu)
	here        bool        // doWait is running f: the first backend call f makes may run on its caller's goroutine
	hereCall    *inflight   // that call, run by doWait once the lock is released
	calls       []*inflight // backend calls in flight, in the order sent, for the watchdog
	watchdog    timer       // armed for the earliest timeout of calls (startCall)
	watchAt     time.Time   // when the watchdog fires

	// delayTurn: the last Acquire left claims of other lock-delays
	// queued; nextDelay's go next (the first delay after the last call's,
	// round to the lowest), so that streams of some delays' attempts
	// cannot starve another's.
	delayTurn bool
	nextDelay time.Duration

	watchMu  sync.Mutex
	watchers map[*func(Notice)]struct{} // see WatchNotices
}

// incarnation is one backend session.
type incarnation struct {
	id        ID
	life      *lifeline
	version   uint64            // owned-set version last seen in full; 0 asks for the list
	owned     map[string]uint64 // owned set as of version
	released  map[string]uint64 // highest token released per name
	clean     cleanMark         // the last check that found owned and the terms matched term for term
	shortened bool              // SessionLeaseShortened published
	nominal   time.Duration     // OpenReply.Nominal, if valid: grants this long are structural, not shortened
	over      bool
	renewing  bool
	recheck   bool // a notice for a held name came during a renewal: renew again when it ends (ADR 0228)
	renew     timer
	deadline  timer
	near      timer         // WithDeadlineWarning's check, at deadline - margin
	warned    bool          // TermDeadlineNear published for the deadline in force
	margin    time.Duration // the warning's margin for the grant in force (regrant)
	// delayed: an Acquire with a lock-delay was sent under it, so it may
	// hold a lease whose name must wait out the delay if it ends without
	// a release: when its deadline passes it is left to expire, not
	// closed (a Close skips the delay; ADR 0275).
	delayed bool
}

// cleanMark is the owned-set version and heldGen at which checkOwned last
// found every owned lease held by a term with its token and every term's
// lease owned. Version 0 is never a backend's, so the zero mark matches
// nothing.
type cleanMark struct {
	version, heldGen uint64
}

type pendingRelease struct {
	inc   *incarnation
	lease driver.Lease
	done  layer.Runner // nil: none
}

// timer is an engine timer; its stop function is nil when not armed.
type timer struct {
	stop func() bool
	gen  uint64
}

// New validates the options and starts a session on b in the background:
// it is Opening until the backend grants the first session. Use [Open] to
// wait for that.
func New(b Backend, opts ...Option) (*Session, error) {
	if b == nil {
		return nil, errors.New("simba: nil Backend")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	if m, c := o.warnMargin, o.cfg.WithDefaults(); m != 0 && (m < 0 || m >= c.LeaseDuration-c.RenewInterval) {
		return nil, fmt.Errorf("simba: WithDeadlineWarning(%v): the margin must be positive and below LeaseDuration - RenewInterval (%v), or it fires between healthy renewals", m, c.LeaseDuration-c.RenewInterval)
	}
	if o.owner.Identity == "" && len(o.owner.Metadata) == 0 {
		o.owner.Identity = defaultIdentity()
	}
	if err := deadline.ValidateOwner(o.owner.Identity, o.owner.Metadata); err != nil {
		return nil, err
	}
	if o.env == nil {
		o.env = SystemEnv()
	}
	var log *slog.Logger
	if !o.noLog {
		log = o.logger
		if log == nil {
			log = slog.Default()
		}
	}
	root, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg:       o.cfg.WithDefaults(),
		owner:     o.owner,
		b:         b,
		env:       o.env,
		log:       log,
		listeners: o.listeners,
		root:      root,
		cancel:    cancel,
		ready:     make(chan struct{}),
		closed:    make(chan struct{}),
		state:     Opening,
		termCtx:   o.termCtx,
		warn:      o.warnMargin,
		watchers:  make(map[*func(Notice)]struct{}),
		claims:    make(map[string]*claim),
		tokens:    make(map[string]uint64),
	}
	_, s.callsHere = o.env.(*systemEnv)
	layer.Bind(&s.link, hooks{s})
	s.since = s.env.Now()
	s.renewEvery = s.cfg.RenewInterval
	if o.deferStart {
		return s, nil
	}
	if err := s.Start(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// Start subscribes to the backend's release notices (if it broadcasts)
// and starts opening the backend session in the background. [New] calls
// it, unless the session was built [WithDeferredStart]; later calls do
// nothing. After Close it wraps ErrClosed, whether or not the session was
// started before.
func (s *Session) Start() error {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	closed := s.state == Closed
	s.mu.Unlock()
	if closed { // started or not: a caller must not go on with a closed session
		return fmt.Errorf("simba: start session: %w", ErrClosed)
	}
	if s.started {
		return nil
	}
	var unsub func()
	if bc, ok := s.b.(driver.Broadcaster); ok {
		var err error
		unsub, err = bc.Subscribe(s.notice)
		if err != nil {
			return fmt.Errorf("simba: subscribe to release notices: %w", err)
		}
	}
	s.mu.Lock()
	if s.state == Closed {
		s.mu.Unlock()
		if unsub != nil {
			unsub()
		}
		return fmt.Errorf("simba: start session: %w", ErrClosed)
	}
	s.started = true
	s.unsub = unsub
	s.open()
	s.mu.Unlock()
	s.drain()
	return nil
}

// Open starts a session on b and waits until the backend has granted it,
// or ctx ends (then the session is closed and ctx's error returned).
func Open(ctx context.Context, b Backend, opts ...Option) (*Session, error) {
	s, err := New(b, opts...)
	if err != nil {
		return nil, err
	}
	// Open opens, WithDeferredStart or not (Start does nothing the second
	// time): waiting for a Start nobody will call would only end with ctx.
	if err := s.Start(); err != nil {
		_ = s.Close()
		return nil, err
	}
	select {
	case <-s.ready:
		return s, nil
	case <-ctx.Done():
		_ = s.Close()
		return nil, fmt.Errorf("simba: open session: %w", context.Cause(ctx))
	}
}

// Ready returns a channel closed once the first backend session is open.
func (s *Session) Ready() <-chan struct{} { return s.ready }

// Config is the session timing in force, with defaults applied.
func (s *Session) Config() deadline.Config { return s.cfg }

// Owner is the identity and metadata the session's backend sessions are
// opened with (see [WithIdentity]).
func (s *Session) Owner() Owner { return s.owner }

// ID is the current backend session's id, or "" while Opening or Closed.
func (s *Session) ID() ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inc == nil {
		return ""
	}
	return s.inc.id
}

// State is the session's state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Remaining is the time left until the current backend session's local
// deadline; zero while Opening or Closed.
func (s *Session) Remaining() time.Duration {
	s.mu.Lock()
	inc := s.inc
	s.mu.Unlock()
	if inc == nil {
		return 0
	}
	return inc.life.Remaining()
}

// Close ends the session: every term ends with STOPPED, the backend session
// is closed at once (which releases every lease; but one whose local
// deadline has already passed and that asked for a lock-delay is left to
// expire, so that the delay of terms that ended without a release
// counts), and Close waits until
// the last callback has been delivered and every goroutine the session
// started has returned. Called from a callback or a leader task, it does not
// wait (that would be waiting for itself) and returns ErrWouldBlockSelf; a
// Close made afterwards from elsewhere waits for what that one could not.
//
// The leases go at once, as the contract says, so another node may start
// leading while this node's tasks are still returning: their terms are
// already invalid and their contexts cancelled, so a task that checks its
// term (or a fenced resource) does not act. For the ordered handover of a
// deploy (tasks first, then the release), Stop or StepDown the elections
// and Leave the groups before Close.
func (s *Session) Close() error {
	self := s.wouldWaitForSelf(context.Background(), nil)
	s.mu.Lock()
	if s.state == Closed {
		s.mu.Unlock()
		if self {
			// The Close under way may be waiting for this very callback
			// or task.
			return ErrWouldBlockSelf
		}
		<-s.closed
		// The first Close may have been made from a callback, which could
		// not wait: this one waits for what it left (issue 20, item 4).
		s.wg.Wait()
		return nil
	}
	s.setState(Closed)
	inc := s.inc
	s.stopTimer(&s.candidate)
	s.stopTimer(&s.openRetry)
	s.stopTimer(&s.noticeT)
	if len(s.calls) == 0 {
		s.stopTimer(&s.watchdog) // else the last call's reply stops it (forget)
	}
	s.compactOrder() // the claims dropped before Close hear nothing of it
	for _, c := range s.order {
		c.want = false
		c.attempt = 0
		if h := c.held; h != nil {
			c.setHeld(nil)
			s.revoke(c, h, term.Stopped)
			c.h.Lost(h.t, term.Stopped)
		}
		c.h.Closed()
	}
	// A backend session whose local deadline has passed (its deadline
	// timer has not run yet: the process woke from a pause into Close)
	// holds terms that ended without a release: if it asked for a
	// lock-delay, it is left to expire, as expire would have, since a
	// Close would skip the delay (ADR 0275).
	leave := inc != nil && inc.delayed && inc.life.Remaining() <= 0
	if inc != nil {
		inc.over = true
		inc.life.end()
		s.stopTimer(&inc.renew)
		s.stopTimer(&inc.deadline)
		s.stopTimer(&inc.near)
		s.inc = nil // ID is empty once Closed
		s.emit(Event{Kind: SessionClosed, Session: inc.id})
	} else {
		s.emit(Event{Kind: SessionClosed})
	}
	unsub := s.unsub // set by Start under mu
	s.mu.Unlock()
	s.drain()

	var err error
	if inc != nil && !leave {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RenewInterval)
		if e := s.b.Close(ctx, inc.id); e != nil && !errors.Is(e, ErrExpired) && !errors.Is(e, ErrClosed) {
			err = fmt.Errorf("simba: close session %s: %w", inc.id, e)
		}
		cancel()
	}
	s.cancel()
	if unsub != nil {
		unsub()
	}
	if self {
		close(s.closed)
		return errors.Join(err, ErrWouldBlockSelf)
	}
	// Another goroutine may be running the delivery loop (drain returned at
	// once), and replies still in flight may queue more effects (a release's
	// OnRevoked): pending effects hold wg until the loop has run them, and
	// an effect that hands a callback to an executor holds it in turn, so
	// wg is zero only once every callback of every term has been delivered.
	s.wg.Wait()
	close(s.closed)
	return err
}

// Done returns a channel closed when Close has finished: after the
// session's goroutines have returned, or, for a Close made from the
// session's own callback or task (which cannot wait for itself), when it
// returns.
func (s *Session) Done() <-chan struct{} { return s.closed }

// emit publishes e to the log and the listeners after the lock is
// released. Nothing is built when nobody would see it: no listener, and
// the log's level is above e's (a lock's terms are at Debug). Lock held.
func (s *Session) emit(e Event) {
	logs := s.log != nil && s.log.Enabled(context.Background(), eventLevel(e))
	if !logs && len(s.listeners) == 0 {
		return
	}
	s.publish(e, logs)
}

// publish fills in e and defers its delivery. Apart from emit so that e
// is moved to the heap (the deferred closure keeps it) only when someone
// will see it. Lock held.
func (s *Session) publish(e Event, logs bool) {
	e.Time = s.env.Now()
	e.State = s.state
	if e.Session == "" && s.inc != nil {
		e.Session = s.inc.id
	}
	if e.RenewEvery == 0 {
		e.RenewEvery = s.renewEvery
	}
	s.deferFn(func() {
		if logs {
			logEvent(s.log, e)
		}
		for _, l := range s.listeners {
			l(e)
		}
	})
}

// deferFn runs f after the engine's lock is released, after everything
// deferred before it, on the goroutine releasing the lock. It must be called
// with the lock held (inside do or a layer.ClaimHandler method).
// Modules built on the session use it to deliver callbacks in order without
// holding the lock.
func (s *Session) deferFn(f func()) {
	s.effects = append(s.effects, f)
	if !s.effectsHeld {
		s.effectsHeld = true
		s.wg.Add(1) // until the loop has run every effect (drain): Close waits for it
	}
}

// do runs f with the engine's lock held, then runs what f deferred. It is
// how modules built on the session (election, lock, group) change engine
// state; f must not block.
func (s *Session) do(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	s.drain()
}

// doWait is do for a caller that waits for what f starts (a lock's first
// attempt, the release of a Close): the first backend call f makes runs on
// the caller's goroutine once the lock is released, reply included, instead
// of on a goroutine of its own. That saves two goroutine hops (and a fresh
// goroutine's stack growth) on the path a lock-heavy service pays twice per
// lock. Only under the system Env, whose Call is a bare goroutine: a
// simulated Env keeps every call, to delay, drop or reorder it. ctx bounds
// the caller's wait: when it ends first, the call is given up as if its
// timeout had come (a late win is released). Calls f makes after the first
// one, and calls its reply makes, go to goroutines as usual, so a caller
// never runs another caller's batch.
func (s *Session) doWait(ctx context.Context, f func()) {
	s.mu.Lock()
	s.here = s.callsHere
	f()
	s.here = false
	c := s.hereCall
	s.hereCall = nil
	s.mu.Unlock()
	if c != nil {
		c.runHere(ctx)
	}
	s.drain()
}

// drain runs the session's delivery loop: deferred effects, in order. One
// goroutine runs it at a time (the first to release the lock with effects
// pending; no goroutine hop); an effect that re-enters the engine leaves
// its own effects to the loop already running, so order is kept and
// nothing recurses. While effects are pending they hold the session's wait
// group (deferFn), so that Close, which waits for it, also waits for
// effects that replies queue behind a loop another goroutine is running.
func (s *Session) drain() {
	s.mu.Lock()
	if s.draining || len(s.effects) == 0 {
		s.mu.Unlock()
		return
	}
	s.draining = true
	s.mu.Unlock()
	// The goroutine running the loop is marked as the loop while it runs
	// effects: whatever runs user code from here (a Listener, an executor
	// that runs a callback inline, Direct or not) is then known to be on
	// the loop, and a blocking call made from it does not wait for the loop
	// it holds up (issue 20, item 1; ADR 0183). Once per drain with
	// effects, never on a call with none (a lock's acquire and release).
	loop := s.inside.enter(mark{loop: true})
	defer s.inside.exit(loop)
	s.mu.Lock()
	for len(s.effects) > 0 {
		f := s.effects[0]
		s.effects[0] = nil
		s.effects = s.effects[1:]
		s.mu.Unlock()
		f()
		s.mu.Lock()
	}
	s.effects = nil
	s.draining = false
	if s.effectsHeld {
		s.effectsHeld = false
		s.wg.Done()
	}
	s.mu.Unlock()
}

// goOwn runs f, a leader task of owner (a claim or a claim's owner key; nil:
// the whole session's), on a goroutine of the session's Env, counted by
// Close and recognised as owner's (so that blocking calls made from f do not
// wait for f). Modules built on the session run leader tasks with it.
func (s *Session) goOwn(owner any, f func()) {
	s.wg.Add(1)
	s.env.Go(func() {
		defer s.wg.Done()
		s.runInside(owner, false, f)
	})
}

// hold makes Close wait until release is called (unless Close is called
// from the session's own callbacks or tasks). Modules built on the session
// hold it while a callback is queued or running on their executor, so that
// nothing is delivered after Close returns.
func (s *Session) hold() (release func()) {
	s.wg.Add(1)
	var once sync.Once
	return func() { once.Do(s.wg.Done) }
}

// runInside runs f, a user callback of owner (a claim or a claim's owner key;
// nil: the whole session's), marked as such: blocking calls made from f
// without a context do not wait for work that f itself delays. loop says f
// runs on the delivery loop (a Direct executor), which then delivers
// nothing else until f returns. Callback executors of modules built on the
// session wrap user callbacks with it.
func (s *Session) runInside(owner any, loop bool, f func()) {
	id := s.inside.enter(mark{owner: owner, loop: loop})
	defer s.inside.exit(id)
	f()
}

// wouldWaitForSelf reports whether a wait for owner's handovers (owner: a
// claim or a claim's owner key; nil: the whole session, as Close waits)
// would wait for the caller itself: ctx was handed out for a term of owner
// (its callbacks' and tasks' context; any term of the session when owner is
// nil), or the calling goroutine is running owner's callback or task (any,
// for nil), or a callback on the delivery loop, which every handover's
// delivery waits for. A wait for another owner's handover from a callback
// or task off the loop does not depend on the caller, and waits. Blocking
// calls use it to avoid deadlocking on themselves.
func (s *Session) wouldWaitForSelf(ctx context.Context, owner any) bool {
	if m, _ := ctx.Value(markerKey{}).(*claim); m != nil && m.s == s && (owner == nil || m.ownerKey() == owner) {
		return true
	}
	for _, m := range s.inside.current() {
		if owner == nil || m.owner == nil || m.owner == owner || m.loop {
			return true
		}
	}
	return false
}

type markerKey struct{}

// after arms t to run f with the lock held after d. Lock held.
func (s *Session) after(t *timer, d time.Duration, f func()) {
	s.stopTimer(t)
	t.gen++
	a := &armed{s: s, t: t, gen: t.gen, f: f}
	s.wg.Add(1)
	a.stop = s.env.AfterFunc(d, a.fire)
	t.stop = a.cancel
}

// armed is one arming of an engine timer: one allocation for what every
// timer needs (a backend call's timeout is the watchdog's, startCall).
type armed struct {
	s    *Session
	t    *timer
	gen  uint64
	f    func()
	stop func() bool // the Env's
	done atomic.Bool // wg.Done called
}

// fire runs f with the lock held, unless the timer was stopped or re-armed
// meanwhile, or the session closed.
func (a *armed) fire() {
	defer a.release()
	s := a.s
	s.mu.Lock()
	if a.t.gen != a.gen || a.t.stop == nil || s.state == Closed {
		s.mu.Unlock()
		return
	}
	a.t.stop = nil
	a.f()
	s.mu.Unlock()
	s.drain()
}

// cancel stops the Env's timer; if that prevented fire, Close need not
// wait for it.
func (a *armed) cancel() bool {
	if a.stop() {
		a.release()
		return true
	}
	return false
}

func (a *armed) release() {
	if a.done.CompareAndSwap(false, true) {
		a.s.wg.Done()
	}
}

func (s *Session) stopTimer(t *timer) {
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
	t.gen++
}

// call runs a backend call with a timeout of one renewal period in force.
// reply runs with the lock held, once: with timedOut true if the timeout
// came first (the call's context is then cancelled). If the real reply
// comes after the timeout, late (if not nil) runs with the lock held: a
// late win must still be given back. Lock held.
func (s *Session) call(op func(ctx context.Context), reply func(timedOut bool), late func()) {
	s.callIn(s.root, op, reply, late)
}

// callIn is call with ctx derived from parent instead of the session's
// root context. Lock held.
func (s *Session) callIn(parent context.Context, op func(ctx context.Context), reply func(timedOut bool), late func()) {
	c := &funcCall{opF: op, replyF: reply, lateF: late}
	s.startCall(&c.inflight, parent, c)
	s.env.Call(c.parts())
}

// callAlone sends c, started by startCall, a call that concerns one claim
// alone (alone: one name, one lease): it may run on the goroutine waiting
// for it, doWait's caller or runner's (a caller blocked in waitRunning for
// that claim), whose context may give it up. A call for several claims
// never does, so that one caller's context never fails another's attempt.
// Lock held.
func (s *Session) callAlone(alone bool, runner chan *inflight, c *inflight) {
	switch {
	case alone && s.here && s.hereCall == nil:
		s.hereCall = c // doWait runs it when f is done
	case alone && runner != nil && len(runner) == 0:
		runner <- c // never blocks: only the engine sends, with its lock held
	default:
		s.env.Call(c.parts())
	}
}

// startCall makes c, the inflight of call (which embeds it), a backend
// call: its context, its timeout, counted for Close. Lock held.
//
// The timeout is the session's watchdog's, not a timer of the call's own:
// the watchdog is armed for the earliest timeout of the calls in flight,
// and a call that returns leaves it armed, so that a stream of calls (a
// lock's acquire and release, over and over) arms no timer per call
// (ADR 0161). When it fires it times out every call due, then is armed for
// the next.
func (s *Session) startCall(c *inflight, parent context.Context, call callBody) {
	c.s, c.call = s, call
	c.ctx.Context, c.cancel = context.WithCancel(parent)
	now := s.env.Now()
	c.due = now.Add(s.renewEvery)
	c.ctx.deadline = c.due
	if dl, ok := parent.Deadline(); ok && dl.Before(c.ctx.deadline) {
		c.ctx.deadline = dl
	}
	s.calls = append(s.calls, c)
	if s.watchdog.stop == nil || c.due.Before(s.watchAt) {
		s.watchAt = c.due
		s.after(&s.watchdog, c.due.Sub(now), s.watch)
	}
	s.wg.Add(1)
}

// watch times out every call in flight whose timeout has come, and arms
// the watchdog for the earliest timeout still to come. Lock held.
func (s *Session) watch() {
	now := s.env.Now()
	var due []*inflight
	n := 0
	var next time.Time
	for _, c := range s.calls {
		if !now.Before(c.due) {
			due = append(due, c)
			continue
		}
		if n == 0 || c.due.Before(next) {
			next = c.due
		}
		s.calls[n] = c
		n++
	}
	clear(s.calls[n:])
	s.calls = s.calls[:n]
	if n > 0 {
		s.watchAt = next
		s.after(&s.watchdog, next.Sub(now), s.watch)
	}
	for _, c := range due {
		c.timeout()
	}
}

// forget takes a call that replied or was given up off the watchdog's
// list. The watchdog stays armed (it finds nothing due when it fires),
// unless the session is closed: Close waits for its timers. Lock held.
func (s *Session) forget(c *inflight) {
	if i := slices.Index(s.calls, c); i >= 0 {
		s.calls = slices.Delete(s.calls, i, i+1)
	}
	if len(s.calls) == 0 && s.state == Closed {
		s.stopTimer(&s.watchdog)
	}
}

// waitRunning blocks until stop is closed, ctx ends or the session is
// closed, and meanwhile runs on the calling goroutine the backend calls
// that attempt the claim of name alone (a notice's, a candidate tick's):
// a caller blocked in lock.Acquire would otherwise be woken by the
// goroutine running the call, one hop more between a release notice and
// the new holder. stop must be closed with the engine's lock held (when
// the claim's wait is over: a term won, an attempt refused), so that
// while it is open the claim of name is the caller's. ctx gives up a call
// it runs, as doWait's. Only under the system Env (see doWait).
func (s *Session) waitRunning(ctx context.Context, name string, stop <-chan struct{}) {
	r := make(chan *inflight, 1)
	s.mu.Lock()
	c := s.claims[name]
	select {
	case <-stop:
		c = nil
	default:
	}
	if c == nil || !s.callsHere || c.runner != nil || s.state == Closed {
		s.mu.Unlock()
		select {
		case <-stop:
		case <-ctx.Done():
		case <-s.closed:
		}
		return
	}
	c.runner = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if c.runner == r {
			c.runner = nil
		}
		s.mu.Unlock()
		select {
		case x := <-r: // sent before the runner was taken away: run it as usual
			s.env.Call(x.parts())
		default:
		}
	}()
	for {
		select {
		case x := <-r:
			x.runHere(ctx)
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-s.closed:
			return
		}
	}
}

// inflight is one backend call: its context, its timeout and what to do
// with its reply. It is embedded in the struct that holds the call's
// request and reply (funcCall, acquireCall, releaseCall), so that a call
// costs one allocation, not one per closure and captured variable.
type inflight struct {
	s        *Session
	ctx      callCtx
	cancel   context.CancelFunc
	due      time.Time // when the watchdog times it out
	finished bool      // reply ran (lock held)
	call     callBody
}

// callBody is what a backend call does: op without the engine's lock, then
// reply with it (timedOut: the timeout came first, or the caller that ran
// it gave up); late with the lock held if op returned after that.
type callBody interface {
	op(ctx context.Context)
	reply(timedOut bool)
	late()
}

// funcCall is a call made of functions, for the calls off a lock's path
// (open, renew, close, a layer's Call).
type funcCall struct {
	inflight
	opF    func(ctx context.Context)
	replyF func(timedOut bool)
	lateF  func()
}

func (f *funcCall) op(ctx context.Context) { f.opF(ctx) }
func (f *funcCall) reply(timedOut bool)    { f.replyF(timedOut) }
func (f *funcCall) late() {
	if f.lateF != nil {
		f.lateF()
	}
}

func (c *inflight) run() { c.call.op(&c.ctx) }

// callCtx is a backend call's context: cancelled by the call's timer (one
// renewal period, on the Env's clock) or by Close, as the context it
// embeds, and reporting that timer's time as its Deadline, so that a
// backend that cannot interrupt a wait in its server bounds the wait by it
// (the SQL backends' lock waits, ADR 0135) without a second timer. Without
// it the call had no deadline, and the SQL backends bounded each lock wait
// by MaxLease (30 s by default): a call given up after the renewal period
// could wait on in the database and commit long after.
type callCtx struct {
	context.Context
	deadline time.Time
}

// Deadline is the end of the call's renewal period, or the parent's
// deadline if that comes first.
func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// parts are what Env.Call runs.
func (c *inflight) parts() (op, reply func()) { return c.run, c.replied }

// runHere runs the call and its reply on the calling goroutine, which
// waits for it; when ctx ends first the call is given up as if its timeout
// had come.
func (c *inflight) runHere(ctx context.Context) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, c.abandon)
		defer stop()
	}
	c.run()
	c.replied()
}

// timeout runs with the lock held when the call's timeout comes first. The
// caller has taken it off the watchdog's list.
func (c *inflight) timeout() {
	if !c.finished {
		c.finished = true
		c.cancel()
		c.call.reply(true)
	}
}

// abandon gives the call up as if its timeout had come: the caller that
// runs it (doWait) stopped waiting.
func (c *inflight) abandon() {
	s := c.s
	s.mu.Lock()
	if !c.finished {
		s.forget(c)
		c.timeout()
	}
	s.mu.Unlock()
	s.drain()
}

// replied runs once op has returned.
func (c *inflight) replied() {
	s := c.s
	defer s.wg.Done()
	s.mu.Lock()
	if !c.finished {
		c.finished = true
		s.forget(c)
		c.cancel()
		c.call.reply(false)
	} else if s.state != Closed {
		c.call.late()
	}
	s.mu.Unlock()
	s.drain()
}
