package election

import (
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The seeded simulation: several nodes, each a real Session and real
// Elections, over one in-memory backend, all driven by one event queue on
// virtual true time from a single goroutine, so one seed reproduces one run
// exactly. Node clocks run at their own rates, replies are delayed,
// dropped, duplicated and reordered, nodes pause for longer than the lease,
// crash and come back, elections step down and stop, and the backend loses
// its data. After every event a checker verifies the promises of the
// specification (see check).

// simConfig is one simulation's shape.
type simConfig struct {
	nodes    int
	names    []string
	duration time.Duration // virtual time with faults
	quiet    time.Duration // then without faults (liveness)
	drift    float64       // the configured bound
	rateDev  float64       // actual node/backend rate deviation; > drift breaks the model
	faults   bool
	dataLoss bool // the backend may lose its data
	// grantNum/grantDen: the backend grants this fraction of the lease
	// (5/12 like ZooKeeper: the shortened-grant path); 0 means all of it.
	grantNum, grantDen int
	lease              time.Duration // 0: the default 15s
}

// variedSim derives a run's shape from its seed: 2–5 nodes, 1–3 names,
// sometimes ZooKeeper-like shortened grants, sometimes a larger drift (with
// clocks within it). The lease stays 15s: the fault timings are sized for it.
func variedSim(seed uint64) simConfig {
	r := rand.New(rand.NewPCG(seed, 0x54a9e))
	c := defaultSim()
	c.nodes = 2 + r.IntN(4)
	c.names = []string{"alpha", "beta", "gamma"}[:1+r.IntN(3)]
	if r.IntN(3) == 0 {
		c.grantNum, c.grantDen = 5, 12
	}
	if r.IntN(4) == 0 {
		c.drift = 0.1
		c.rateDev = 0.1
	}
	return c
}

func defaultSim() simConfig {
	return simConfig{nodes: 3, names: []string{"alpha", "beta"}, duration: 3 * time.Minute, quiet: 70 * time.Second, drift: 0.01, rateDev: 0.01, faults: true, dataLoss: true}
}

type simEvent struct {
	at    int64
	seq   uint64
	node  *simNode // nil: the backend or the world
	fn    func()
	dead  bool
	label string
}

type eventQueue []*simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	cfg     simConfig
	seed    uint64
	rng     *rand.Rand
	now     int64 // true time, ns
	seq     uint64
	q       eventQueue
	base    time.Time
	backend *memory.Backend
	timing  deadline.Config
	nodes   []*simNode
	nextID  int
	faulty  bool // faults still being injected
	trace   strings.Builder
	hash    uint64
	events  int

	// checker state
	violations []string
	maxToken   map[string]uint64
	sessionIDs map[session.ID]bool
	tasks      []*simTask
	epoch      uint64 // how many times the backend lost its data
}

// preLoss reports whether token was handed out before the backend last
// lost its data. The memory backend's tokens are epoch<<40 | counter (see
// its package doc), the epoch counting data losses.
func (w *sim) preLoss(token uint64) bool { return token>>40 < w.epoch }

type simNode struct {
	w           *sim
	id          int
	rate        float64 // node clock rate relative to true (backend) time
	pausedUntil int64
	crashed     bool
	s           *session.Session
	elections   map[string]*Election
	cbs         map[string][]simCallback
}

type simCallback struct {
	elected bool
	t       *term.Term
	reason  term.RevokeReason
}

type simTask struct {
	node     *simNode
	name     string
	t        *term.Term
	done     func()
	exiting  bool
	exited   bool
	boundAt  int64 // true time by which a voluntary handover stops waiting for it
	stopWait int64 // true time the handover started (0: none)
	// sessionAtStop is the node's session when the handover started.
	sessionAtStop session.ID
}

func newSim(cfg simConfig, seed uint64) *sim {
	w := &sim{
		cfg:        cfg,
		seed:       seed,
		rng:        rand.New(rand.NewPCG(seed, 0x5eed)),
		base:       time.Unix(1_000_000, 0),
		faulty:     cfg.faults,
		maxToken:   make(map[string]uint64),
		sessionIDs: make(map[session.ID]bool),
		timing:     deadline.Config{Drift: cfg.drift, LeaseDuration: cfg.lease}.WithDefaults(),
	}
	ids := 0
	opts := []memory.Option{memory.WithClock(backendClock{w}), memory.WithIDSource(func() session.ID {
		ids++
		return session.ID(fmt.Sprintf("s%04d", ids))
	})}
	if cfg.grantDen > 0 {
		opts = append(opts, memory.WithGrantFraction(cfg.grantNum, cfg.grantDen))
	}
	b, err := memory.New(opts...)
	if err != nil {
		panic(err)
	}
	w.backend = b
	for range cfg.nodes {
		w.addNode()
	}
	return w
}

type backendClock struct{ w *sim }

func (c backendClock) Now() time.Time { return c.w.base.Add(time.Duration(c.w.now)) }

// schedule queues fn at true time at, on node (nil: not paused with any node).
func (w *sim) schedule(at int64, node *simNode, label string, fn func()) *simEvent {
	if at < w.now {
		at = w.now
	}
	w.seq++
	e := &simEvent{at: at, seq: w.seq, node: node, fn: fn, label: label}
	heap.Push(&w.q, e)
	return e
}

func (w *sim) delay(maxMs int) int64 {
	return int64(w.rng.IntN(maxMs*1000+1)) * int64(time.Microsecond)
}

// step runs the next event; it reports false when there is none before end.
func (w *sim) step(end int64) bool {
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(*simEvent)
		if e.dead {
			continue
		}
		if e.at > end {
			heap.Push(&w.q, e)
			w.now = end
			return false
		}
		w.now = e.at
		if n := e.node; n != nil {
			if n.crashed {
				continue
			}
			if n.pausedUntil > w.now { // a paused process runs nothing until it wakes
				w.seq++
				e.at, e.seq = n.pausedUntil, w.seq
				heap.Push(&w.q, e)
				continue
			}
		}
		w.events++
		h := fnv.New64a()
		fmt.Fprintf(h, "%d|%d|%s", w.hash, w.now, e.label)
		w.hash = h.Sum64()
		e.fn()
		w.afterEvent()
		return true
	}
	w.now = end
	return false
}

// run runs events until true time end.
func (w *sim) run(end time.Duration) {
	for w.step(int64(end)) {
	}
}

// ---- the nodes' environment

type nodeEnv struct{ n *simNode }

func (e nodeEnv) Now() time.Time {
	return e.n.w.base.Add(time.Duration(float64(e.n.w.now) * e.n.rate))
}

func (e nodeEnv) AfterFunc(d time.Duration, f func()) func() bool {
	w := e.n.w
	at := w.now + int64(float64(d)/e.n.rate) + 1
	ev := w.schedule(at, e.n, "timer", f)
	return func() bool {
		if ev.dead || w.now > ev.at || (w.now == ev.at && !inQueue(w, ev)) {
			return false
		}
		ev.dead = true
		return true
	}
}

func inQueue(w *sim, ev *simEvent) bool {
	for _, e := range w.q {
		if e == ev {
			return true
		}
	}
	return false
}

func (e nodeEnv) Go(f func()) {
	e.n.w.schedule(e.n.w.now, e.n, "go", f)
}

// Call sends a request to the backend and its reply back, with delays;
// faults lose replies (delivered after a minute: the engine has long given
// up) and duplicate requests (the backend runs the call twice).
func (e nodeEnv) Call(op, reply func()) {
	w := e.n.w
	up := w.delay(20)
	if w.faulty && w.rng.IntN(20) == 0 {
		up += w.delay(8000) // a slow network or a slow backend
	}
	w.schedule(w.now+up, nil, fmt.Sprintf("op n%d", e.n.id), func() {
		op()
		down := w.delay(20)
		if w.faulty {
			switch w.rng.IntN(25) {
			case 0:
				down += int64(time.Minute) // lost
			case 1:
				w.schedule(w.now+w.delay(3000), nil, "dup op", op) // duplicated request
			case 2:
				down += w.delay(8000)
			}
		}
		w.schedule(w.now+down, e.n, fmt.Sprintf("reply n%d", e.n.id), reply)
	})
}

func (e nodeEnv) Jitter() float64 { return e.n.w.rng.Float64() }

// simExecutor runs callbacks a little later on the node's own "goroutine".
type simExecutor struct{ n *simNode }

func (x simExecutor) Execute(f func()) error {
	w := x.n.w
	w.schedule(w.now+w.delay(5), x.n, "callback", f)
	return nil
}

// simBackend delays release notices on their way to a node.
type simBackend struct {
	*memory.Backend
	n *simNode
}

func (b simBackend) Subscribe(fn func(driver.Notice)) (func(), error) {
	w := b.n.w
	return b.Backend.Subscribe(func(no driver.Notice) {
		if w.faulty && w.rng.IntN(10) == 0 {
			return // a lost notice: the next candidate tick covers it
		}
		w.schedule(w.now+w.delay(10), b.n, "notice", func() { fn(no) })
	})
}

func (w *sim) addNode() *simNode {
	w.nextID++
	n := &simNode{w: w, id: w.nextID, elections: make(map[string]*Election), cbs: make(map[string][]simCallback)}
	dev := w.cfg.rateDev
	n.rate = 1 - dev + w.rng.Float64()*2*dev
	if w.rng.IntN(3) == 0 {
		n.rate = 1 - dev // the worst case: slow
	}
	s, err := session.New(simBackend{w.backend.NewClient(), n},
		session.WithEnv(nodeEnv{n}), session.WithConfig(deadline.Config{Drift: w.cfg.drift, LeaseDuration: w.cfg.lease}), session.WithLogger(nil),
		session.WithListener(func(e session.Event) { w.sessionEvent(n, e) }))
	if err != nil {
		panic(err)
	}
	n.s = s
	for _, name := range w.cfg.names {
		n.start(name)
	}
	w.nodes = append(w.nodes, n)
	return n
}

func (n *simNode) start(name string) {
	w := n.w
	e, err := Start(n.s, name, WithExecutor(simExecutor{n}),
		RunWhileLeader(func(context.Context, *term.Term) error { return nil }),
		WithListener(Funcs{
			Elected: func(t *term.Term) { w.callback(n, name, simCallback{elected: true, t: t}) },
			Revoked: func(t *term.Term, r term.RevokeReason) { w.callback(n, name, simCallback{t: t, reason: r}) },
		}))
	if err != nil {
		w.violate("node %d: start %s: %v", n.id, name, err)
		return
	}
	e.spawn = func(t *term.Term, _ Task, done func()) {
		w.tasks = append(w.tasks, &simTask{node: n, name: name, t: t, done: done})
	}
	n.elections[name] = e
}

// ---- faults and actions

// act injects one random action or fault while the run is faulty.
func (w *sim) act() {
	if !w.faulty {
		return
	}
	live := make([]*simNode, 0, len(w.nodes))
	for _, n := range w.nodes {
		if !n.crashed && n.pausedUntil <= w.now { // a paused process does nothing
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return
	}
	n := live[w.rng.IntN(len(live))]
	name := w.cfg.names[w.rng.IntN(len(w.cfg.names))]
	switch k := w.rng.IntN(100); {
	case k < 30: // step down
		if e := n.elections[name]; e != nil {
			w.note("n%d %s: step down", n.id, name)
			w.beginHandover(n, name)
			e.stepDown(time.Duration(w.rng.IntN(10_000)) * time.Millisecond)
		}
	case k < 45: // stop, and start again later
		if e := n.elections[name]; e != nil {
			w.note("n%d %s: stop", n.id, name)
			w.beginHandover(n, name)
			done := e.stop()
			delete(n.elections, name)
			var restart func()
			restart = func() {
				select {
				case <-done:
					if !n.crashed && n.elections[name] == nil {
						n.start(name)
					}
				default:
					w.schedule(w.now+int64(time.Second), n, "restart retry", restart)
				}
			}
			w.schedule(w.now+w.delay(10_000), n, "restart", restart)
		}
	case k < 65: // pause the process, sometimes longer than the lease
		n.pausedUntil = w.now + w.delay(40_000)
		w.note("n%d: paused until %v", n.id, time.Duration(n.pausedUntil))
	case k < 72: // crash; a new node replaces it
		n.crashed = true
		w.note("n%d: crashed", n.id)
		w.schedule(w.now+w.delay(20_000), nil, "replace", func() { w.addNode() })
	case k < 76 && w.cfg.dataLoss: // the backend restarts without persistence
		w.backend.LoseData(true)
		w.epoch++
		w.note("backend lost its data")
	}
}

// beginHandover records, for the checker, when a voluntary handover starts
// and the latest it may wait for the term's task.
func (w *sim) beginHandover(n *simNode, name string) {
	held := n.heldTerm(name)
	for _, t := range w.tasks {
		if t.node == n && t.t == held && held.Valid() && !t.exited && t.stopWait == 0 {
			t.stopWait = w.now
			t.boundAt = w.now + int64(float64(t.t.Remaining())/n.rate) + 1
			t.sessionAtStop = n.s.ID()
		}
	}
}

// afterEvent lets tasks whose term ended return (after a while, sometimes
// longer than the term had left), then checks every promise.
func (w *sim) afterEvent() {
	for _, t := range w.tasks {
		if t.exiting || t.t.Context().Err() == nil || t.node.crashed {
			continue
		}
		t.exiting = true
		exit := w.delay(2000)
		if w.rng.IntN(10) == 0 {
			exit = w.delay(30_000) // ignores cancellation for a long time
		}
		w.schedule(w.now+exit, t.node, "task exit", func() {
			w.note("n%d: task of %s returned", t.node.id, t.t)
			t.exited = true
			t.done()
		})
	}
	w.check()
}

// ---- the checker

// note adds a line to the run's trace (printed for a failing seed with
// SIMBA_SIM_TRACE=1).
func (w *sim) note(format string, args ...any) {
	if w.trace.Len() < 1<<20 {
		fmt.Fprintf(&w.trace, "%v "+format+"\n", append([]any{time.Duration(w.now)}, args...)...)
	}
}

func (w *sim) violate(format string, args ...any) {
	if len(w.violations) < 5 {
		w.violations = append(w.violations, fmt.Sprintf("t=%v: ", time.Duration(w.now))+fmt.Sprintf(format, args...))
	}
}

// check verifies mutual exclusion: at no true instant do two nodes hold a
// valid term for the same name. Validity changes only at events (a term
// begins) or as clocks run (it ends), so checking after every event covers
// every instant. A backend that loses its data (a Redis restart without
// persistence) breaks exclusion by design (docs/design.md §5): terms whose
// lease was granted before the loss are left out; their lower fencing
// tokens are the guard.
func (w *sim) check() {
	for _, name := range w.cfg.names {
		var holders []string
		for _, n := range w.nodes {
			if n.crashed {
				continue
			}
			t := n.heldTerm(name)
			if t == nil {
				continue
			}
			if t.Valid() && !w.preLoss(t.Token()) {
				holders = append(holders, fmt.Sprintf("n%d:%s", n.id, t))
			}
		}
		if len(holders) > 1 {
			w.violate("two valid terms for %s: %v", name, holders)
		}
	}
}

func (n *simNode) heldTerm(name string) *term.Term {
	var t *term.Term
	if e := n.elections[name]; e != nil {
		e.eng.Do(func() { t = e.c.Term() })
	}
	return t
}

// sessionEvent checks tokens and session ids as terms and sessions begin.
func (w *sim) sessionEvent(n *simNode, e session.Event) {
	switch e.Kind {
	case session.TermRevoked:
		w.note("n%d: term %s#%d revoked %s", n.id, e.Name, e.Token, e.Reason.String())
	case session.SessionExpired, session.SessionDeadlinePassed:
		w.note("n%d: %v %s", n.id, e.Kind, e.Session)
	case session.TermElected:
		w.note("n%d: term %s#%d begins", n.id, e.Name, e.Token)
		if w.preLoss(e.Token) {
			break // granted before a data loss, arriving late: fenced off by lower tokens
		}
		if e.Token <= w.maxToken[e.Name] {
			w.violate("token for %s went from %d to %d (node %d)", e.Name, w.maxToken[e.Name], e.Token, n.id)
		}
		w.maxToken[e.Name] = max(w.maxToken[e.Name], e.Token)
	case session.SessionOpened:
		if w.sessionIDs[e.Session] {
			w.violate("session %s opened again (node %d): revived or reused", e.Session, n.id)
		}
		w.sessionIDs[e.Session] = true
		w.note("n%d: session %s opened", n.id, e.Session)
	}
}

// callback checks pairing and the handover order as callbacks run.
func (w *sim) callback(n *simNode, name string, cb simCallback) {
	if cb.elected {
		w.note("n%d: OnElected(%s)", n.id, cb.t)
	} else {
		w.note("n%d: OnRevoked(%s, %s)", n.id, cb.t, cb.reason.String())
	}
	cbs := n.cbs[name]
	if cb.elected {
		if len(cbs) > 0 && cbs[len(cbs)-1].elected {
			w.violate("node %d %s: OnElected(%s) while %s was not revoked", n.id, name, cb.t, cbs[len(cbs)-1].t)
		}
		// In a voluntary handover, the old task returned before the new
		// OnElected, unless the handover's bound (the old term's remaining
		// time) ran out or the old session ended involuntarily meanwhile.
		for _, t := range w.tasks {
			if t.name != name || t.exited || t.stopWait == 0 || t.t == cb.t || t.node.crashed {
				continue
			}
			if w.now >= t.boundAt || t.node.s.ID() != t.sessionAtStop || t.node.s.Remaining() <= 0 || w.preLoss(t.t.Token()) {
				continue
			}
			w.violate("node %d %s: OnElected(%s) before the task of %s on node %d returned (voluntary handover)", n.id, name, cb.t, t.t, t.node.id)
		}
	} else {
		if len(cbs) == 0 || !cbs[len(cbs)-1].elected || cbs[len(cbs)-1].t != cb.t {
			w.violate("node %d %s: OnRevoked(%s) without its OnElected", n.id, name, cb.t)
		}
	}
	n.cbs[name] = append(cbs, cb)
}

// ---- a whole run

type simResult struct {
	violations []string
	trace      string
	hash       uint64
	events     int
	leaderless []string
}

func runSim(cfg simConfig, seed uint64) simResult {
	w := newSim(cfg, seed)
	// Faults and actions at random times.
	var tick func()
	tick = func() {
		w.act()
		if w.faulty {
			w.schedule(w.now+w.delay(8000), nil, "act", tick)
		}
	}
	w.schedule(w.delay(8000), nil, "act", tick)
	w.run(cfg.duration)
	w.faulty = false
	// Liveness: once faults stop, every name has a leader within the
	// failover bound (pauses and cooldowns started before end by then).
	w.run(cfg.duration + cfg.quiet)
	var leaderless []string
	if cfg.faults || cfg.quiet > 0 {
		for _, name := range cfg.names {
			leaders := 0
			for _, n := range w.nodes {
				if !n.crashed {
					if t := n.heldTerm(name); t != nil && t.Valid() {
						leaders++
					}
				}
			}
			if leaders != 1 {
				leaderless = append(leaderless, fmt.Sprintf("%s has %d leaders %v after faults stopped", name, leaders, time.Duration(cfg.quiet)))
			}
		}
	}
	// Stop everything; every OnElected must then have its OnRevoked.
	var stops []<-chan struct{}
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		for _, name := range cfg.names {
			if e := n.elections[name]; e != nil {
				stops = append(stops, e.stop())
			}
		}
	}
	w.run(cfg.duration + cfg.quiet + 2*time.Minute)
	for _, ch := range stops {
		select {
		case <-ch:
		default:
			w.violate("a Stop did not complete within two minutes")
		}
	}
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		for name, cbs := range n.cbs {
			if len(cbs) > 0 && cbs[len(cbs)-1].elected {
				w.violate("node %d %s: OnElected(%s) never followed by OnRevoked", n.id, name, cbs[len(cbs)-1].t)
			}
		}
	}
	return simResult{violations: w.violations, trace: w.trace.String(), hash: w.hash, events: w.events, leaderless: leaderless}
}
