package election_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// countAcquires counts a client's Acquire calls and the names they carry.
// attempted, if set, is closed once the replies carried every name once.
type countAcquires struct {
	session.Backend
	calls, names atomic.Int64
	want         int64
	attempted    chan struct{}
	once         sync.Once
}

func (c *countAcquires) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	c.calls.Add(1)
	r, err := c.Backend.Acquire(ctx, req)
	if c.names.Add(int64(len(req.Names))) >= c.want && c.attempted != nil {
		c.once.Do(func() { close(c.attempted) })
	}
	return r, err
}

// timedEnv is the system Env, timing every backend call: the call itself
// (op) and the engine's handling of its reply (reply, under the engine's
// lock, then the effects it deferred).
type timedEnv struct {
	session.Env
	mu    sync.Mutex
	calls []time.Duration
}

func (e *timedEnv) Call(op, reply func()) {
	e.Env.Call(func() {
		start := time.Now()
		op()
		reply()
		e.mu.Lock()
		e.calls = append(e.calls, time.Since(start))
		e.mu.Unlock()
	}, func() {})
}

// take returns the calls timed since the last take.
func (e *timedEnv) take() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.calls
	e.calls = nil
	return c
}

// BenchmarkScale10000Elections runs the scale goals of issue 11 on the
// in-memory backend, so that the figures are the engine's alone: session L
// leads n elections, session C runs n candidate elections for the same
// names. It reports the heap and goroutines per idle election (candidate
// and leader), the candidate's backend calls per candidate tick and names
// per call, and the renewal latency (backend call + the engine's handling
// of the reply) with n leases against one. The leader's heap includes the
// in-memory backend's lease records, which a real backend keeps on its
// server. One measurement per run, whatever b.N: the figures are counts
// and ratios, not a loop's time.
func BenchmarkScale10000Elections(b *testing.B) {
	const n = 10_000
	cfg := deadline.Config{LeaseDuration: 3 * time.Second} // renew every 1 s, candidate tick 0.5 s + jitter
	for b.Loop() {
		one := renewal(b, cfg, 1)
		r := scale(b, cfg, n)
		b.ReportMetric(r.heapCandidate, "heap-B/candidate")
		b.ReportMetric(r.heapLeader, "heap-B/leader")
		b.ReportMetric(r.goroutines, "goroutines/election")
		b.ReportMetric(r.callsPerTick, "acquire-calls/tick")
		b.ReportMetric(r.namesPerCall, "names/acquire-call")
		b.ReportMetric(float64(one.Microseconds()), "renew-1-µs")
		b.ReportMetric(float64(r.renew.Microseconds()), fmt.Sprintf("renew-%d-µs", n))
		b.ReportMetric(float64(r.renew)/float64(one), "renew-ratio")
	}
}

type scaleResult struct {
	heapCandidate, heapLeader float64
	goroutines                float64
	callsPerTick              float64
	namesPerCall              float64
	renew                     time.Duration
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// openTimed opens a session on b whose backend calls are timed.
func openTimed(b *testing.B, be session.Backend, cfg deadline.Config) (*session.Session, *timedEnv) {
	b.Helper()
	env := &timedEnv{Env: session.SystemEnv()}
	s, err := session.Open(context.Background(), be, session.WithConfig(cfg), session.WithEnv(env), session.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	return s, env
}

// startAll starts an election for each name and waits until want of
// them are leaders.
func startAll(b *testing.B, s *session.Session, names []string, want int) []*election.Election {
	b.Helper()
	var won atomic.Int64
	all := make(chan struct{})
	l := election.Funcs{Elected: func(*term.Term) {
		if won.Add(1) == int64(want) {
			close(all)
		}
	}}
	es := make([]*election.Election, 0, len(names))
	for _, name := range names {
		e, err := election.Start(s, name, election.WithListener(l), election.WithExecutor(election.Direct{}))
		if err != nil {
			b.Fatal(err)
		}
		es = append(es, e)
	}
	if want > 0 {
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatalf("%d of %d elections won in a minute", won.Load(), want)
		}
	}
	return es
}

func stopAll(es []*election.Election) {
	for _, e := range es {
		_ = e.Stop(context.Background())
	}
}

// renewMedian waits for k renewal periods and returns the median time of
// the calls made meanwhile: the session is idle, so they are renewals.
func renewMedian(env *timedEnv, every time.Duration, k int) time.Duration {
	env.take()
	time.Sleep(time.Duration(k)*every + every/2) // a benchmark's window, not a wait for a state
	c := env.take()
	if len(c) == 0 {
		return 0
	}
	slices.Sort(c)
	return c[len(c)/2]
}

func renewal(b *testing.B, cfg deadline.Config, n int) time.Duration {
	mem, _ := memory.New()
	s, env := openTimed(b, mem, cfg)
	defer s.Close()
	es := startAll(b, s, names(n), n)
	defer stopAll(es)
	return renewMedian(env, s.Config().RenewInterval, 5)
}

func names(n int) []string {
	ns := make([]string, n)
	for i := range ns {
		ns[i] = fmt.Sprintf("job-%05d", i)
	}
	return ns
}

func scale(b *testing.B, cfg deadline.Config, n int) scaleResult {
	var r scaleResult
	mem, _ := memory.New()
	ns := names(n)

	g0, h0 := runtime.NumGoroutine(), heap()
	leader, lenv := openTimed(b, mem, cfg)
	defer leader.Close()
	les := startAll(b, leader, ns, n)
	defer stopAll(les)
	lenv.take()
	h1 := heap()
	r.heapLeader = float64(h1-h0) / float64(n)

	cand := &countAcquires{Backend: mem.NewClient(), want: int64(n), attempted: make(chan struct{})}
	candidate, _ := openTimed(b, cand, cfg)
	defer candidate.Close()
	ces := startAll(b, candidate, ns, 0)
	defer stopAll(ces)
	select { // the first attempts answered: every election is idle now
	case <-cand.attempted:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d names attempted in a minute", cand.names.Load(), n)
	}
	h2 := heap()
	r.heapCandidate = float64(h2-h1) / float64(n)
	r.goroutines = float64(runtime.NumGoroutine()-g0) / float64(2*n)

	// The candidate ticks every RetryDelay(jitter): count its Acquire calls
	// over a window of ticks, and the names each carried.
	calls0, names0 := cand.calls.Load(), cand.names.Load()
	start := time.Now()
	r.renew = renewMedian(lenv, leader.Config().RenewInterval, 5)
	elapsed := time.Since(start)
	calls := cand.calls.Load() - calls0
	meanTick := candidate.Config().RetryDelay(0.5)
	r.callsPerTick = float64(calls) / (float64(elapsed) / float64(meanTick))
	if calls > 0 {
		r.namesPerCall = float64(cand.names.Load()-names0) / float64(calls)
	}
	return r
}
