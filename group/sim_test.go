package group

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The seeded group simulation: several nodes, each a real Session and a
// real Group member, over one in-memory backend, driven by one event queue
// on virtual true time from a single goroutine, so a seed reproduces a run
// exactly. Node clocks run at their own rates; replies are delayed, lost,
// duplicated and reordered; nodes pause past the lease, crash (a new node
// replaces them), leave and join again, step down for a while; the backend
// loses its data. After
// every event the checker verifies that no partition has two valid owners;
// as terms begin, that tokens rise per partition; as callbacks run, that
// they are paired and that a partition's next owner hears OnAssigned only
// after the previous owner's task returned in a voluntary handover. Once
// faults stop: every partition owned, each member owning ⌊N/m⌋ or ⌈N/m⌉,
// nothing moving for two more candidate ticks, and a member that joins
// then moves at most ⌈N/m⌉ partitions.

type simConfig struct {
	nodes      int
	partitions int
	duration   time.Duration // with faults
	quiet      time.Duration // then without, before the liveness checks
	drift      float64
	rateDev    float64 // > drift breaks the model
	faults     bool
	plant      plant // a bug planted to show the checker catches it
	// mixedN: a node joins with partitions+extra instead (a rolling
	// deploy that changes the count); the group serves the smallest.
	mixedN int
	// blindAtEnd: one member stays blind (its polls fail, every other
	// call works) from the moment faults stop: it must withdraw within the
	// quiet period and the others serve every partition, fairly, without
	// it (ADR 0190).
	blindAtEnd bool
	// older: the first node also holds a member record of the form
	// versions before ADR 0189 wrote (no count), for a member that takes
	// nothing: its share must be covered by the others (ADR 0225). The
	// fairness checks are off then (the older member's quota is spread
	// as holdings fall), every other check stands.
	older bool
}

type plant int

const (
	_ plant = iota
	// plantNoTaskWait: the group is told each task returned as it starts.
	plantNoTaskWait
)

func variedSim(seed uint64) simConfig {
	r := rand.New(rand.NewPCG(seed, 0x6e0))
	return simConfig{
		nodes:      2 + r.IntN(4),
		partitions: []int{1, 3, 7, 16, 40}[r.IntN(5)],
		duration:   3 * time.Minute,
		quiet:      70 * time.Second,
		drift:      0.01,
		rateDev:    0.01,
		faults:     true,
		mixedN:     []int{0, 0, 4}[r.IntN(3)],
		blindAtEnd: r.IntN(3) == 0,
		older:      r.IntN(4) == 0,
	}
}

type simEvent struct {
	at    int64
	seq   uint64
	node  *simNode
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
	rng     *rand.Rand
	now     int64
	seq     uint64
	q       eventQueue
	base    time.Time
	backend *memory.Backend
	nodes   []*simNode
	nextID  int
	faulty  bool
	trace   strings.Builder
	hash    uint64
	events  int

	violations []string
	nextCheck  int64            // a large group's next check (check)
	elected    map[string]int64 // when each term began, by name#token
	maxToken   map[string]uint64
	tasks      []*simTask
	pending    map[*term.Term]*simTask // voluntary handovers, by term
}

type simNode struct {
	w           *sim
	id          int
	rate        float64
	pausedUntil int64
	crashed     bool
	s           *session.Session
	client      *memory.Backend
	g           *Group
	n           int   // the partition count it joined with
	blindUntil  int64 // its inspections fail until then
	blindToEnd  bool  // blind from the end of the faults on (blindAtEnd): not counted as a member
	rejoining   bool
	open        map[int]*term.Term // partitions with OnAssigned and no OnRevoked yet
}

type simTask struct {
	node     *simNode
	p        int
	t        *term.Term
	done     func()
	exiting  bool
	exited   bool
	boundAt  int64 // a voluntary handover stops waiting for it by then
	stopWait bool
	session  session.ID
}

func newSim(cfg simConfig, seed uint64) *sim {
	w := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x5eed)), base: time.Unix(1_000_000, 0), faulty: cfg.faults,
		maxToken: map[string]uint64{}, elected: map[string]int64{}, pending: map[*term.Term]*simTask{}}
	ids := 0
	// The backend's maximum lease is the sessions' lease: a data loss is
	// followed by a quarantine of exactly one lease (ADR 0130), the
	// shortest that keeps exclusion, so the checker sees it does.
	b, err := memory.New(memory.WithClock(backendClock{w}), memory.WithMaxLease(deadline.DefaultLeaseDuration), memory.WithIDSource(func() session.ID {
		ids++
		return session.ID(fmt.Sprintf("s%04d", ids))
	}))
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

func (w *sim) schedule(at int64, node *simNode, label string, fn func()) *simEvent {
	at = max(at, w.now)
	w.seq++
	e := &simEvent{at: at, seq: w.seq, node: node, fn: fn, label: label}
	heap.Push(&w.q, e)
	return e
}

func (w *sim) delay(maxMs int) int64 {
	return int64(w.rng.IntN(maxMs*1000+1)) * int64(time.Microsecond)
}

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
			if n.pausedUntil > w.now {
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

func (w *sim) run(end time.Duration) {
	for w.step(int64(end)) {
	}
}

// ---- the nodes' world

type nodeEnv struct{ n *simNode }

func (e nodeEnv) Now() time.Time { return e.n.w.base.Add(time.Duration(float64(e.n.w.now) * e.n.rate)) }

func (e nodeEnv) AfterFunc(d time.Duration, f func()) func() bool {
	w := e.n.w
	ev := w.schedule(w.now+int64(float64(d)/e.n.rate)+1, e.n, "timer", f)
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

func (e nodeEnv) Go(f func()) { e.n.w.schedule(e.n.w.now, e.n, "go", f) }

func (e nodeEnv) Call(op, reply func()) {
	w := e.n.w
	up := w.delay(20)
	if w.faulty && w.rng.IntN(20) == 0 {
		up += w.delay(8000)
	}
	w.schedule(w.now+up, nil, fmt.Sprintf("op n%d", e.n.id), func() {
		op()
		down := w.delay(20)
		if w.faulty {
			switch w.rng.IntN(25) {
			case 0:
				down += int64(time.Minute) // lost
			case 1:
				w.schedule(w.now+w.delay(3000), nil, "dup op", op)
			case 2:
				down += w.delay(8000)
			}
		}
		w.schedule(w.now+down, e.n, fmt.Sprintf("reply n%d", e.n.id), reply)
	})
}

func (e nodeEnv) Jitter() float64 { return e.n.w.rng.Float64() }

type simExecutor struct{ n *simNode }

func (x simExecutor) Execute(f func()) error {
	w := x.n.w
	if w.faulty && w.rng.IntN(50) == 0 {
		return errors.New("sim: executor full")
	}
	d := w.delay(5)
	if w.cfg.partitions > 1000 {
		d = 0 // thousands of callbacks in a row, one at a time
	}
	w.schedule(w.now+d, x.n, "callback", f)
	return nil
}

type simBackend struct {
	*memory.Backend
	n *simNode
}

// Inspect fails while the node is blind: a member that cannot see its
// group while its other calls work (issue 20, item 5).
func (b simBackend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	if b.n.w.now < b.n.blindUntil {
		return nil, errors.New("sim: listing denied")
	}
	return b.Backend.Inspect(ctx, req)
}

func (b simBackend) Subscribe(fn func(driver.Notice)) (func(), error) {
	w := b.n.w
	return b.Backend.Subscribe(func(no driver.Notice) {
		if w.faulty && w.rng.IntN(10) == 0 {
			return
		}
		w.schedule(w.now+w.delay(10), b.n, "notice", func() { fn(no) })
	})
}

func (w *sim) addNode() *simNode {
	w.nextID++
	n := &simNode{w: w, id: w.nextID, open: map[int]*term.Term{}}
	dev := w.cfg.rateDev
	n.rate = 1 - dev + w.rng.Float64()*2*dev
	if w.rng.IntN(3) == 0 {
		n.rate = 1 - dev
	}
	n.client = w.backend.NewClient()
	s, err := session.New(simBackend{n.client, n},
		session.WithEnv(nodeEnv{n}), session.WithConfig(deadline.Config{Drift: w.cfg.drift}), session.WithLogger(nil),
		session.WithListener(func(e session.Event) { w.sessionEvent(n, e) }))
	if err != nil {
		panic(err)
	}
	n.s = s
	n.n = w.cfg.partitions
	switch {
	case !w.faulty:
		n.n = w.agreed() // the join after settling moves only its share
	case w.cfg.mixedN > 0 && w.rng.IntN(3) == 0:
		n.n += w.cfg.mixedN
	}
	w.foreignNames(n)
	if w.cfg.older && len(w.nodes) == 0 {
		// On a session of its own, as an older process would be: the
		// group maps each session to one member.
		older, err := session.New(simBackend{w.backend.NewClient(), n},
			session.WithEnv(nodeEnv{n}), session.WithConfig(deadline.Config{Drift: w.cfg.drift}), session.WithLogger(nil))
		if err != nil {
			panic(err)
		}
		eng := layer.MustOf(older)
		c, err := eng.Claim(fmt.Sprintf("grp:m:old%d", n.id), olderRecord{})
		if err != nil {
			panic(err)
		}
		eng.Do(func() { c.Want(true) })
	}
	n.join()
	w.nodes = append(w.nodes, n)
	return n
}

// foreignNames puts other claims in the group's namespace on the node's
// session: names of a group's forms must be refused (an election there
// would be a phantom member or hold a partition, issue 20 item 6), and
// names in the namespace of no group form must not disturb it.
func (w *sim) foreignNames(n *simNode) {
	eng := layer.MustOf(n.s)
	for _, name := range []string{"grp:m:ghost", "grp:m:ghost.3", "grp:p:0"} {
		if c, err := eng.Claim(name, foreign{}); err == nil {
			eng.Do(c.Drop)
			w.violate("n%d: a claim of another kind was accepted under the group's name %q", n.id, name)
		}
	}
	if w.rng.IntN(2) == 0 {
		c, err := eng.Claim(fmt.Sprintf("grp:p:x%d", n.id), foreign{})
		if err != nil {
			w.violate("n%d: a name of no group form refused: %v", n.id, err)
			return
		}
		eng.Do(func() { c.Want(true) })
	}
}

// olderRecord is the member record of a member of an older version (no
// count in its name) that takes no partition. A group's own claim as far
// as the session's reservation goes: only an older process can make one.
type olderRecord struct{ foreign }

func (olderRecord) GroupLease() {}

// foreign is a claim of another kind (an election's, say) in the group's
// namespace.
type foreign struct{}

func (foreign) Won(*term.Term)                     {}
func (foreign) Lost(*term.Term, term.RevokeReason) {}
func (foreign) Closed()                            {}

func (n *simNode) join() {
	w := n.w
	g, err := Join(n.s, "grp", n.n, WithMemberID(fmt.Sprintf("n%d", n.id)), WithExecutor(simExecutor{n}),
		RunWhileOwner(func(context.Context, int, *term.Term) error { return nil }),
		WithListener(Funcs{
			Assigned: func(p int, t *term.Term) { w.assigned(n, p, t) },
			Revoked:  func(p int, t *term.Term, r term.RevokeReason) { w.revoked(n, p, t, r) },
		}))
	if err != nil {
		w.violate("n%d: join: %v", n.id, err)
		return
	}
	g.spawn = func(p int, t *term.Term, _ Task, done func()) {
		if t.Context().Err() != nil {
			w.violate("n%d: a task started for %s, a term already over", n.id, t)
		}
		if w.cfg.plant == plantNoTaskWait {
			w.schedule(w.now, n, "planted: task done at once", done)
			done = func() {}
		}
		w.tasks = append(w.tasks, &simTask{node: n, p: p, t: t, done: done})
	}
	n.g = g
}

// ---- faults

func (w *sim) act() {
	var live []*simNode
	for _, n := range w.nodes {
		if !n.crashed && n.pausedUntil <= w.now {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return
	}
	n := live[w.rng.IntN(len(live))]
	switch k := w.rng.IntN(100); {
	case k < 25: // leave, join again later
		if n.g == nil || n.rejoining {
			return
		}
		w.note("n%d: leave", n.id)
		done := n.g.leave()
		n.rejoining = true
		var rejoin func()
		rejoin = func() {
			select {
			case <-done:
				n.rejoining = false
				n.g = nil
				n.join()
			default:
				w.schedule(w.now+int64(time.Second), n, "rejoin retry", rejoin)
			}
		}
		w.schedule(w.now+w.delay(15_000), n, "rejoin", rejoin)
	case k < 50:
		n.pausedUntil = w.now + w.delay(40_000)
		w.note("n%d: paused until %v", n.id, time.Duration(n.pausedUntil))
	case k < 60:
		n.crashed = true
		w.note("n%d: crashed", n.id)
		w.schedule(w.now+w.delay(20_000), nil, "replace", func() { w.addNode() })
	case k < 64:
		w.backend.LoseData(false)
		w.note("backend lost its data")
	case k < 72: // step down for a while (ends well before the quiet period does)
		if n.g == nil || n.rejoining {
			return
		}
		cool := time.Duration(w.delay(20_000))
		w.note("n%d: step down for %v", n.id, cool)
		n.g.stepDown(cool)
	case k < 78: // cannot see the group for a while; every other call works
		n.blindUntil = w.now + w.delay(40_000)
		w.note("n%d: blind until %v", n.id, time.Duration(n.blindUntil))
	}
}

func (w *sim) afterEvent() {
	live := w.tasks[:0]
	for _, t := range w.tasks {
		if !t.exiting && !t.node.crashed {
			live = append(live, t)
		}
	}
	clear(w.tasks[len(live):])
	w.tasks = live // a task that began exiting never needs a look again
	for _, t := range w.tasks {
		if t.exiting || t.t.Context().Err() == nil || t.node.crashed {
			continue
		}
		t.exiting = true
		exit := w.delay(2000)
		if w.faulty && w.rng.IntN(10) == 0 { // the settling promises assume tasks that honour cancellation
			exit = w.delay(30_000)
		}
		if w.faulty && w.rng.IntN(40) == 0 {
			// Never returns: the handover must still end, by the term's
			// remaining time, and the Leave with it.
			w.note("n%d: the task of %s never returns", t.node.id, t.t)
			continue
		}
		w.schedule(w.now+exit, t.node, "task exit", func() {
			t.exited = true
			delete(w.pending, t.t)
			t.done()
		})
	}
	w.check()
}

// ---- the checker

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

// check: at this true instant, no partition has two valid owners, across
// data losses too (the quarantine after one grants nothing until every
// term granted before it has passed its deadline: ADR 0130).
func (w *sim) check() {
	if w.cfg.partitions > 1000 {
		// A large group is checked every 20ms of true time, not after
		// every event: a check walks every partition of every node.
		if w.now < w.nextCheck {
			return
		}
		w.nextCheck = w.now + int64(20*time.Millisecond)
	}
	first := make(map[int]*term.Term)
	firstNode := make(map[int]int)
	for _, n := range w.nodes {
		if n.crashed || n.g == nil {
			continue
		}
		layer.MustOf(n.s).Do(func() {
			for _, pt := range n.g.parts {
				if pt == nil || pt.c == nil {
					continue
				}
				t := pt.c.Term()
				if t == nil || !t.Valid() {
					continue
				}
				if o, ok := first[pt.p]; ok {
					w.violate("partition %d has two valid owners: [n%d:%s n%d:%s]", pt.p, firstNode[pt.p], o, n.id, t)
					continue
				}
				first[pt.p], firstNode[pt.p] = t, n.id
			}
		})
	}
}

// terms are the node's held terms by partition, valid or not.
func (n *simNode) terms() map[int]*term.Term {
	out := map[int]*term.Term{}
	if n.g == nil {
		return out
	}
	layer.MustOf(n.s).Do(func() {
		for _, pt := range n.g.parts {
			if pt != nil && pt.c != nil {
				if t := pt.c.Term(); t != nil {
					out[pt.p] = t
				}
			}
		}
	})
	return out
}

func (w *sim) sessionEvent(n *simNode, e session.Event) {
	switch e.Kind {
	case session.TermElected:
		w.note("n%d: %s#%d begins", n.id, e.Name, e.Token)
		w.elected[fmt.Sprintf("%s#%d", e.Name, e.Token)] = w.now
		if e.Token <= w.maxToken[e.Name] {
			w.violate("token of %s went from %d to %d (n%d)", e.Name, w.maxToken[e.Name], e.Token, n.id)
		}
		w.maxToken[e.Name] = max(w.maxToken[e.Name], e.Token)
	case session.TermRevoked:
		w.note("n%d: %s#%d revoked %s", n.id, e.Name, e.Token, e.Reason)
		if !e.Reason.Voluntary() {
			break
		}
		// A voluntary handover begins: the partition's task must return
		// before the next owner hears OnAssigned, unless the term's time
		// (the session's, as a term lives on its lifeline) runs out first.
		for _, t := range w.tasks {
			if t.node == n && t.t.Name() == e.Name && t.t.Token() == e.Token && !t.exited && !t.stopWait {
				t.stopWait = true
				t.boundAt = w.now + int64(float64(n.s.Remaining())/n.rate) + 1
				t.session = n.s.ID()
				w.pending[t.t] = t
			}
		}
	case session.SessionExpired, session.SessionDeadlinePassed, session.SessionOpened:
		w.note("n%d: %v %s", n.id, e.Kind, e.Session)
	}
}

func (w *sim) assigned(n *simNode, p int, t *term.Term) {
	w.note("n%d: OnAssigned(%d, %s)", n.id, p, t)
	if old := n.open[p]; old != nil {
		w.violate("n%d: OnAssigned(%d, %s) while %s was not revoked", n.id, p, t, old)
	}
	n.open[p] = t
	for _, pt := range w.pending {
		if pt.p != p || pt.t == t || pt.exited || pt.node.crashed {
			continue
		}
		// A term older than the one handed over is no new owner: its
		// OnAssigned arrives late, from a node paused since it won (seed
		// 125), and its term is already over (as in the election's check).
		if t.Token() < pt.t.Token() && !t.Valid() {
			continue
		}
		// No data-loss exemption: the quarantine after a loss lets no new
		// owner begin before the old term's deadline, which is boundAt.
		if w.now >= pt.boundAt || pt.node.s.ID() != pt.session || pt.node.s.Remaining() <= 0 {
			continue
		}
		w.violate("n%d: OnAssigned(%d, %s) before the task of %s on n%d returned (voluntary handover)", n.id, p, t, pt.t, pt.node.id)
	}
}

func (w *sim) revoked(n *simNode, p int, t *term.Term, r term.RevokeReason) {
	w.note("n%d: OnRevoked(%d, %s, %s)", n.id, p, t, r)
	if n.open[p] != t {
		w.violate("n%d: OnRevoked(%d, %s) without its OnAssigned (open: %v)", n.id, p, t, n.open[p])
	}
	delete(n.open, p)
}

// ---- a whole run

type simResult struct {
	violations []string
	trace      string
	hash       uint64
	events     int
}

// tick is the longest candidate tick with the default timing.
const tick = 5 * time.Second

func runSim(cfg simConfig, seed uint64) simResult {
	w := newSim(cfg, seed)
	var act func()
	act = func() {
		if w.faulty {
			w.act()
			w.schedule(w.now+w.delay(8000), nil, "act", act)
		}
	}
	w.schedule(w.delay(8000), nil, "act", act)
	w.run(cfg.duration)
	w.faulty = false
	if cfg.blindAtEnd && w.members() >= 2 {
		for _, n := range w.nodes {
			if !n.crashed && n.g != nil {
				n.blindUntil, n.blindToEnd = math.MaxInt64, true
				w.note("n%d: blind from now on", n.id)
				break
			}
		}
	}
	end := cfg.duration + cfg.quiet
	w.run(end)
	if cfg.faults {
		w.settled("after the faults stopped")
		// Stable: nothing moves for two more candidate ticks.
		before := w.owners()
		end += 2 * tick
		w.run(end)
		if after := w.owners(); !sameOwners(before, after) {
			w.violate("the assignment moved after settling: %v → %v", before, after)
		}
		// A join moves at most ⌈N/m⌉ partitions, within three ticks: the
		// newcomer's hold (one tick, ADR 0193), the others' sheds (the
		// ⌈N/m⌉ quotas go to those holding the most, a ranking that can
		// change between two members' polls, so one of them may shed one
		// more partition a tick later: seed 205), the newcomer's take.
		w.addNode()
		m := w.members()
		end += 3*tick + time.Second
		w.run(end)
		w.settled("after a join")
		moved := 0
		after := w.owners()
		for p, tok := range before {
			if after[p] != tok {
				moved++
			}
		}
		if bound := (w.agreed() + m - 1) / m; moved > bound && !w.olderLive() {
			w.violate("a join moved %d partitions, more than ⌈N/m⌉ = %d (N=%d, m=%d)", moved, bound, w.agreed(), m)
		}
	}
	// Leave everywhere: every OnAssigned then has its OnRevoked.
	var leaves []<-chan struct{}
	for _, n := range w.nodes {
		if !n.crashed && n.g != nil {
			leaves = append(leaves, n.g.leave())
		}
	}
	w.run(end + 2*time.Minute)
	for _, ch := range leaves {
		select {
		case <-ch:
		default:
			w.violate("a Leave did not complete within two minutes")
		}
	}
	for _, n := range w.nodes {
		if !n.crashed && len(n.open) > 0 {
			w.violate("n%d: OnAssigned never followed by OnRevoked for %v", n.id, n.open)
		}
	}
	return simResult{violations: w.violations, trace: w.trace.String(), hash: w.hash, events: w.events}
}

// olderLive reports whether an older member's record may be live: its node
// runs (cfg.older puts it on the first node).
func (w *sim) olderLive() bool {
	return w.cfg.older && len(w.nodes) > 0 && !w.nodes[0].crashed
}

func (w *sim) members() int {
	m := 0
	for _, n := range w.nodes {
		if !n.crashed && n.g != nil && !n.blindToEnd {
			m++
		}
	}
	return m
}

// owners maps each partition to its valid term's token.
func (w *sim) owners() map[int]uint64 {
	out := map[int]uint64{}
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		for p, t := range n.terms() {
			if t.Valid() {
				out[p] = t.Token()
			}
		}
	}
	return out
}

func sameOwners(a, b map[int]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, t := range a {
		if b[p] != t {
			return false
		}
	}
	return true
}

// settled: every partition has a valid owner, and each live member owns
// ⌊N/m⌋ or ⌈N/m⌉.
func (w *sim) settled(when string) {
	m := w.members()
	np := w.agreed()
	lo, hi := np/m, (np+m-1)/m
	total := 0
	for _, n := range w.nodes {
		if n.crashed || n.g == nil {
			continue
		}
		if n.blindToEnd {
			// Withdrawn a lease duration after its last poll, long
			// before the quiet period ends: it must own nothing.
			for p, t := range n.terms() {
				if t.Valid() {
					w.violate("%s: n%d cannot see the group but still owns partition %d", when, n.id, p)
				}
			}
			continue
		}
		k := 0
		for p, t := range n.terms() {
			if t.Valid() {
				k++
				// Its OnAssigned may still be on its way; ten seconds
				// after the term began it must have been delivered, or
				// the term given back (a refused OnAssigned).
				if n.open[p] != t && w.now-w.elected[fmt.Sprintf("%s#%d", t.Name(), t.Token())] > int64(10*time.Second) {
					w.violate("%s: n%d holds %s, a term its listener never heard of (OnAssigned refused or lost)", when, n.id, t)
				}
			}
		}
		total += k
		if (k < lo || k > hi) && !w.olderLive() {
			w.violate("%s: n%d owns %d partitions, want %d or %d (N=%d, m=%d)", when, n.id, k, lo, hi, np, m)
		}
	}
	if total != np {
		w.violate("%s: %d of %d partitions owned", when, total, np)
	}
}

// agreed is the partition count the live members serve: the smallest
// they joined with (ADR 0189).
func (w *sim) agreed() int {
	np := 0
	for _, n := range w.nodes {
		if !n.crashed && n.g != nil && !n.blindToEnd && (np == 0 || n.n < np) {
			np = n.n
		}
	}
	if np == 0 {
		return w.cfg.partitions
	}
	return np
}
