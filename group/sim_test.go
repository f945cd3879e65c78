package group

import (
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
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
		maxToken: map[string]uint64{}, pending: map[*term.Term]*simTask{}}
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
	w.schedule(w.now+w.delay(5), x.n, "callback", f)
	return nil
}

type simBackend struct {
	*memory.Backend
	n *simNode
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
	n.join()
	w.nodes = append(w.nodes, n)
	return n
}

func (n *simNode) join() {
	w := n.w
	g, err := Join(n.s, "grp", w.cfg.partitions, WithMemberID(fmt.Sprintf("n%d", n.id)), WithExecutor(simExecutor{n}),
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
	}
}

func (w *sim) afterEvent() {
	for _, t := range w.tasks {
		if t.exiting || t.t.Context().Err() == nil || t.node.crashed {
			continue
		}
		t.exiting = true
		exit := w.delay(2000)
		if w.faulty && w.rng.IntN(10) == 0 { // the settling promises assume tasks that honour cancellation
			exit = w.delay(30_000)
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
	owners := make(map[int][]string)
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		for p, t := range n.terms() {
			if t.Valid() {
				owners[p] = append(owners[p], fmt.Sprintf("n%d:%s", n.id, t))
			}
		}
	}
	for p, o := range owners {
		if len(o) > 1 {
			w.violate("partition %d has two valid owners: %v", p, o)
		}
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
		// A join moves at most ⌈N/m⌉ partitions.
		w.addNode()
		m := w.members()
		end += 2*tick + time.Second
		w.run(end)
		w.settled("after a join")
		moved := 0
		after := w.owners()
		for p, tok := range before {
			if after[p] != tok {
				moved++
			}
		}
		if bound := (cfg.partitions + m - 1) / m; moved > bound {
			w.violate("a join moved %d partitions, more than ⌈N/m⌉ = %d (N=%d, m=%d)", moved, bound, cfg.partitions, m)
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

func (w *sim) members() int {
	m := 0
	for _, n := range w.nodes {
		if !n.crashed && n.g != nil {
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
	lo, hi := w.cfg.partitions/m, (w.cfg.partitions+m-1)/m
	total := 0
	for _, n := range w.nodes {
		if n.crashed || n.g == nil {
			continue
		}
		k := 0
		for _, t := range n.terms() {
			if t.Valid() {
				k++
			}
		}
		total += k
		if k < lo || k > hi {
			w.violate("%s: n%d owns %d partitions, want %d or %d (N=%d, m=%d)", when, n.id, k, lo, hi, w.cfg.partitions, m)
		}
	}
	if total != w.cfg.partitions {
		w.violate("%s: %d of %d partitions owned", when, total, w.cfg.partitions)
	}
}
