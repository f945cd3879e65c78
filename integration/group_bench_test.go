package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// BenchmarkGroupScale: 1,024 partitions over 10 members on each backend
// (lease 2s, renewal every 600ms: candidate ticks of 300–600ms). It
// reports the time to settle (every partition owned, shares fair) after
// the first join of all, a join, a leave and a crash, and the backend
// calls per member per candidate tick once settled.
func BenchmarkGroupScale(b *testing.B) {
	const n, members = 1024, 10
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			newClient := bk.start(b)
			for i := 0; i < b.N; i++ {
				var ms []*scaleMember
				add := func() *scaleMember {
					m := &scaleMember{counting: counting{cut: cut{Backend: newClient()}}}
					s, err := session.Open(context.Background(), m, session.WithConfig(timing), session.WithLogger(nil))
					if err != nil {
						b.Fatal(err)
					}
					m.s = s
					m.g, err = group.Join(s, fmt.Sprintf("scale%d", i), n)
					if err != nil {
						b.Fatal(err)
					}
					ms = append(ms, m)
					return m
				}
				for range members {
					add()
				}
				first := settleScale(b, n, ms)

				before := make([]int64, len(ms))
				for k, m := range ms {
					before[k] = m.calls.Load()
				}
				window := 3 * time.Second
				time.Sleep(window)
				var total int64
				for k, m := range ms {
					total += m.calls.Load() - before[k]
				}
				tick := timing.RenewInterval * 3 / 4 // the mean candidate tick
				b.ReportMetric(float64(total)/float64(len(ms))/(float64(window)/float64(tick)), "calls/member/tick")

				add()
				join := settleScale(b, n, ms)
				leaver := ms[0]
				if err := leaver.g.Leave(context.Background()); err != nil {
					b.Fatal(err)
				}
				ms = ms[1:]
				leave := settleScale(b, n, ms)
				crashed := ms[0]
				crashed.off.Store(true)
				ms = ms[1:]
				crash := settleScale(b, n, ms)
				b.ReportMetric(first.Seconds(), "settle-first-s")
				b.ReportMetric(join.Seconds(), "settle-join-s")
				b.ReportMetric(leave.Seconds(), "settle-leave-s")
				b.ReportMetric(crash.Seconds(), "settle-crash-s")
				for _, m := range append(ms, leaver, crashed) {
					_ = m.s.Close()
				}
			}
		})
	}
}

type scaleMember struct {
	counting
	s *session.Session
	g *group.Group
}

// counting counts the backend calls a member makes.
type counting struct {
	cut
	calls atomic.Int64
}

func (c *counting) Renew(ctx context.Context, r driver.RenewRequest) (driver.RenewReply, error) {
	c.calls.Add(1)
	return c.cut.Renew(ctx, r)
}

func (c *counting) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.AcquireReply, error) {
	c.calls.Add(1)
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

// settleScale waits until ms own all n partitions fairly; it returns how
// long that took.
func settleScale(b *testing.B, n int, ms []*scaleMember) time.Duration {
	start := time.Now()
	lo, hi := n/len(ms), (n+len(ms)-1)/len(ms)
	for time.Since(start) < time.Minute {
		total, fair := 0, true
		for _, m := range ms {
			k := len(m.g.Terms())
			total += k
			fair = fair && k >= lo && k <= hi
		}
		if fair && total == n {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("1,024 partitions over %d members not settled within a minute", len(ms))
	return 0
}
