package integration_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// BenchmarkGroupScale: 1,024 partitions over 10 members on each backend,
// each member its own session and client in this process (lease 2s,
// renewal every 600ms: candidate ticks of 300–600ms). It reports the time
// to settle (every partition owned, shares fair) after the first join of
// all, a join, a leave and a crash; the backend calls per member per
// candidate tick once settled, and the Acquire calls among them; the
// Acquire calls the newcomer made to take its share; and the heap per
// owned partition (what the 10 members' groups, claims and terms add to
// the process, the sessions and clients already open and each client's
// first inspection made).
func BenchmarkGroupScale(b *testing.B) {
	const n, members = 1024, 10
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			newClient := bk.start(b)
			for i := 0; i < b.N; i++ {
				changed := make(chan struct{}, 1)
				signal := func() {
					select {
					case changed <- struct{}{}:
					default:
					}
				}
				name := fmt.Sprintf("scale%d", i)
				cfg := groupScaleTiming(bk.name)
				open := func() *scaleMember {
					m := &scaleMember{counting: counting{cut: cut{Backend: newClient()}}}
					s, err := session.Open(context.Background(), m, session.WithConfig(cfg), session.WithLogger(nil))
					if err != nil {
						b.Fatal(err)
					}
					m.s = s
					return m
				}
				join := func(m *scaleMember) {
					var err error
					m.g, err = group.Join(m.s, name, n, group.WithListener(group.Funcs{
						Assigned: func(int, *term.Term) { signal() },
						Revoked:  func(int, *term.Term, term.RevokeReason) { signal() },
					}))
					if err != nil {
						b.Fatal(err)
					}
				}
				var ms []*scaleMember
				for range members {
					ms = append(ms, open())
				}
				// Each client's first inspection opens what it keeps for
				// inspecting (zksimba: its read connection, 3 MB of
				// go-zookeeper buffers): a cost per client, not per partition.
				for _, m := range ms {
					if in, ok := m.Backend.(driver.Inspector); ok {
						if _, err := in.Inspect(context.Background(), driver.InspectRequest{Prefix: name + ":"}); err != nil {
							b.Fatal(err)
						}
					}
				}
				heap0 := heapNow()
				for _, m := range ms {
					join(m)
				}
				first := settleScale(b, n, ms, changed)
				heap := float64(heapNow()-heap0) / n

				// Steady state: calls per member per mean candidate tick.
				before := make([]callCounts, len(ms))
				for k, m := range ms {
					before[k] = m.counts()
				}
				window := 3 * time.Second
				time.Sleep(window) // a measuring window, not a wait for a state
				var total, acquires int64
				for k, m := range ms {
					c := m.counts()
					total += c.all - before[k].all
					acquires += c.acquire - before[k].acquire
				}
				tick := cfg.WithDefaults().RenewInterval * 3 / 4 // the mean candidate tick
				ticks := float64(len(ms)) * float64(window) / float64(tick)

				newcomer := open()
				join(newcomer)
				ms = append(ms, newcomer)
				joinT := settleScale(b, n, ms, changed)
				joinAcquires := newcomer.acquires.Load()
				leaver := ms[0]
				if err := leaver.g.Leave(context.Background()); err != nil {
					b.Fatal(err)
				}
				ms = ms[1:]
				leave := settleScale(b, n, ms, changed)
				crashed := ms[0]
				crashed.off.Store(true)
				ms = ms[1:]
				crash := settleScale(b, n, ms, changed)
				b.ReportMetric(float64(total)/ticks, "calls/member/tick")
				b.ReportMetric(float64(acquires)/ticks, "acquires/member/tick")
				b.ReportMetric(float64(joinAcquires), "join-acquire-calls")
				b.ReportMetric(heap, "heap-B/partition")
				b.ReportMetric(first.Seconds(), "settle-first-s")
				b.ReportMetric(joinT.Seconds(), "settle-join-s")
				b.ReportMetric(leave.Seconds(), "settle-leave-s")
				b.ReportMetric(crash.Seconds(), "settle-crash-s")
				for _, m := range append(ms, leaver, crashed) {
					_ = m.s.Close()
				}
			}
		})
	}
}

// groupScaleTiming is the integration timing (lease 2s) on every backend.
// ZooKeeper ran with the default timing (lease 15s) until its Inspect
// read each lease node at every poll (1,034 reads, which starved the 2s
// sessions); since ADR 0159 a settled poll is three reads.
func groupScaleTiming(string) deadline.Config { return timing }

func heapNow() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

type scaleMember struct {
	counting
	s *session.Session
	g *group.Group
}

// counting counts the backend calls a member makes.
type counting struct {
	cut
	calls    atomic.Int64
	acquires atomic.Int64
}

type callCounts struct{ all, acquire int64 }

func (c *counting) counts() callCounts {
	return callCounts{all: c.calls.Load(), acquire: c.acquires.Load()}
}

func (c *counting) Renew(ctx context.Context, r driver.RenewRequest) (driver.RenewReply, error) {
	c.calls.Add(1)
	return c.cut.Renew(ctx, r)
}

func (c *counting) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.AcquireReply, error) {
	c.calls.Add(1)
	c.acquires.Add(1)
	return c.cut.Acquire(ctx, r)
}

func (c *counting) Release(ctx context.Context, r driver.ReleaseRequest) error {
	c.calls.Add(1)
	return c.cut.Release(ctx, r)
}

func (c *counting) Inspect(ctx context.Context, r driver.InspectRequest) ([]driver.Holder, error) {
	c.calls.Add(1)
	return c.cut.Inspect(ctx, r)
}

// settleScale waits until ms own all n partitions fairly, looking again at
// every OnAssigned or OnRevoked (changed) and at each term's end; it
// returns how long that took.
func settleScale(b *testing.B, n int, ms []*scaleMember, changed <-chan struct{}) time.Duration {
	start := time.Now()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	lo, hi := n/len(ms), (n+len(ms)-1)/len(ms)
	for {
		total, fair := 0, true
		var soonest time.Duration = time.Minute
		for _, m := range ms {
			ts := m.g.Terms()
			k := len(ts)
			total += k
			fair = fair && k >= lo && k <= hi
			for _, t := range ts {
				soonest = min(soonest, t.Remaining())
			}
		}
		if fair && total == n {
			return time.Since(start)
		}
		// A term can also end without a callback yet (its validity runs
		// out first): look again then.
		expiry := time.NewTimer(soonest + time.Millisecond)
		select {
		case <-changed:
		case <-expiry.C:
		case <-limit.C:
			b.Fatalf("%d partitions over %d members not settled within a minute", n, len(ms))
		}
		expiry.Stop()
	}
}
