package group

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The scale benchmarks: 1,024 partitions over 10 members. Settling times
// are measured in the simulated world (virtual time, network delays of up
// to 20ms each way, no faults), so they are exact and repeatable; they are
// bounded by the candidate tick (2.5s + up to 2.5s of jitter with the
// default timing) and, for a crash, by the lease (15s). The real backends'
// figures come from integration's BenchmarkGroupScale.

const (
	scaleN       = 1024
	scaleMembers = 10
)

// waitSettled runs the world until every partition has one valid owner
// and each member owns ⌊N/m⌋ or ⌈N/m⌉; it returns the virtual time taken.
func (w *sim) waitSettled(tb testing.TB, within time.Duration) time.Duration {
	start := w.now
	for end := start + int64(within); w.now < end; {
		w.run(time.Duration(w.now + int64(100*time.Millisecond)))
		if w.isSettled() {
			return time.Duration(w.now - start)
		}
	}
	tb.Fatalf("not settled within %v", within)
	return 0
}

func (w *sim) isSettled() bool {
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
		if k < lo || k > hi {
			return false
		}
		total += k
	}
	return total == w.cfg.partitions
}

func (w *sim) stats(n *simNode) memory.Stats { return n.client.Stats() }

// BenchmarkScale reports, for 1,024 partitions over 10 members: the
// virtual time to settle after a join, a leave and a crash; the Acquire
// calls the newcomer needed to take its share (the goal is one per tick,
// not one per partition); and each member's backend calls per candidate
// tick once settled.
func BenchmarkScale(b *testing.B) {
	var join, leave, crash, steady time.Duration
	var joinAcquires, calls float64
	for i := 0; i < b.N; i++ {
		w := newSim(simConfig{nodes: scaleMembers, partitions: scaleN, drift: 0.01, rateDev: 0.01}, uint64(i+1))
		w.waitSettled(b, 2*time.Minute)
		w.run(time.Duration(w.now) + 10*time.Second)

		// Steady state: calls per member per mean candidate tick (3.75s).
		before := make([]memory.Stats, len(w.nodes))
		for k, n := range w.nodes {
			before[k] = w.stats(n)
		}
		window := 30 * time.Second
		w.run(time.Duration(w.now) + window)
		total := 0
		for k, n := range w.nodes {
			s := w.stats(n)
			total += s.Renew - before[k].Renew + s.Inspect - before[k].Inspect + s.Acquire - before[k].Acquire + s.Release - before[k].Release
		}
		ticks := float64(window) / float64(3750*time.Millisecond)
		calls += float64(total) / float64(len(w.nodes)) / ticks
		steady += window

		n := w.addNode()
		join += w.waitSettled(b, 2*time.Minute)
		joinAcquires += float64(w.stats(n).Acquire)

		done := w.nodes[0].g.leave()
		w.nodes[0].g = nil // not counted as a member from now on
		leave += w.waitSettled(b, 2*time.Minute)
		select {
		case <-done:
		default:
			b.Fatal("Leave did not complete")
		}

		w.nodes[1].crashed = true
		crash += w.waitSettled(b, 2*time.Minute)
	}
	n := float64(b.N)
	b.ReportMetric(join.Seconds()/n, "settle-join-s")
	b.ReportMetric(leave.Seconds()/n, "settle-leave-s")
	b.ReportMetric(crash.Seconds()/n, "settle-crash-s")
	b.ReportMetric(joinAcquires/n, "join-acquire-calls")
	b.ReportMetric(calls/n, "calls/member/tick")
}

// BenchmarkHeapPerPartition reports the heap one member uses per partition
// it owns (its claims, terms and group state, plus the in-memory backend's
// record of the lease, which a real backend keeps elsewhere), on the real
// clock.
func BenchmarkHeapPerPartition(b *testing.B) {
	var perPartition float64
	for i := 0; i < b.N; i++ {
		mb, err := memory.New()
		if err != nil {
			b.Fatal(err)
		}
		s, err := session.Open(context.Background(), mb, session.WithLogger(nil))
		if err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap0 := ms.HeapAlloc
		// The member is alone: nothing revokes, so the N-th OnAssigned
		// means it owns every partition.
		var assigned atomic.Int64
		all := make(chan struct{})
		g, err := Join(s, "scale", scaleN, RunWhileOwner(func(ctx context.Context, _ int, _ *term.Term) error {
			<-ctx.Done()
			return nil
		}), WithListener(Funcs{Assigned: func(int, *term.Term) {
			if assigned.Add(1) == scaleN {
				close(all)
			}
		}}))
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatalf("owns %d of %d partitions after a minute", len(g.Terms()), scaleN)
		}
		if got := len(g.Terms()); got != scaleN {
			b.Fatalf("owns %d valid terms after %d OnAssigned, want %d", got, scaleN, scaleN)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		perPartition += float64(ms.HeapAlloc-heap0) / scaleN
		_ = g.Close()
		_ = s.Close()
	}
	b.ReportMetric(perPartition/float64(b.N), "heap-B/partition")
}
