package integration_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/simbatest"
	"github.com/simba-go/simba/term"
)

// BenchmarkGroupZooKeeperInspect: 1,024 partitions over 10 members on
// ZooKeeper with the integration timing (lease 2s, renewal every 600ms,
// candidate ticks of 300–600ms), each member its own zksimba.Backend. The
// ZooKeeper requests are counted on the wire (a counting dialer: one
// frame per request), so the figures hold for any version of zksimba:
//
//   - reads/poll: the read requests (getData, exists, getChildren, sync)
//     every member's connections sent, per Inspect call, over the run;
//   - sessions-lost: the sessions opened beyond each member's first (a
//     session ZooKeeper expired, or the engine gave up on), and
//     open-failures, the engine's Open calls that failed (each a retry);
//   - settled: 1 if every partition was owned fairly within a minute of
//     the joins, then settle-s, the time that took;
//   - settled-*: the same over a 10 s window once settled, and the polls
//     per member per second in it.
//
// The run ends with that window, or a minute after the joins if the group
// never settled. It reports; it asserts no time.
func BenchmarkGroupZooKeeperInspect(b *testing.B) {
	const n, members = 1024, 10
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		var opts []simbatest.Option
		if cluster {
			name = "ensemble"
			opts = append(opts, simbatest.WithCluster())
		}
		b.Run(name, func(b *testing.B) {
			srv := simbatest.ZooKeeper(b, opts...)
			for i := 0; i < b.N; i++ {
				changed := make(chan struct{}, 1)
				signal := func() {
					select {
					case changed <- struct{}{}:
					default:
					}
				}
				var ms []*zkMember
				for range members {
					m := &zkMember{}
					m.Backend = srv.NewBackend(b, zksimba.WithDialer(m.wire.dial))
					s, err := session.Open(context.Background(), m, session.WithConfig(timing), session.WithLogger(nil))
					if err != nil {
						b.Fatal(err)
					}
					m.s = s
					ms = append(ms, m)
				}
				gname := fmt.Sprintf("zkinspect%d", i)
				start := time.Now()
				for _, m := range ms {
					var err error
					m.g, err = group.Join(m.s, gname, n, group.WithListener(group.Funcs{
						Assigned: func(int, *term.Term) { signal() },
						Revoked:  func(int, *term.Term, term.RevokeReason) { signal() },
					}))
					if err != nil {
						b.Fatal(err)
					}
				}
				settled := waitFair(n, ms, changed, time.Minute)
				settle := time.Since(start)
				at := func() (reads, inspects, opens int64) {
					for _, m := range ms {
						reads += m.wire.reads.Load()
						inspects += m.inspects.Load()
						opens += m.opens.Load()
					}
					return
				}
				failed := func() (n int64) {
					for _, m := range ms {
						n += m.tries.Load() - m.opens.Load()
					}
					return
				}
				r0, i0, o0 := at()
				if settled {
					time.Sleep(10 * time.Second) // a measuring window, not a wait for a state
				}
				r1, i1, o1 := at()
				b.ReportMetric(float64(r1)/float64(max(i1, 1)), "reads/poll")
				b.ReportMetric(float64(o1-members), "sessions-lost")
				b.ReportMetric(float64(failed()), "open-failures")
				b.ReportMetric(float64(btoi(settled)), "settled")
				if settled {
					b.ReportMetric(settle.Seconds(), "settle-s")
					b.ReportMetric(float64(r1-r0)/float64(max(i1-i0, 1)), "settled-reads/poll")
					b.ReportMetric(float64(i1-i0)/float64(members)/10, "settled-polls/member/s")
					b.ReportMetric(float64(o1-o0), "settled-sessions-lost")
				}
				for _, m := range ms {
					_ = m.s.Close()
				}
			}
		})
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// zkMember is one member's backend, counting its Inspect and Open calls.
type zkMember struct {
	*zksimba.Backend
	wire     wireCount
	inspects atomic.Int64
	opens    atomic.Int64 // sessions opened
	tries    atomic.Int64 // Open calls, failed ones too
	s        *session.Session
	g        *group.Group
}

func (m *zkMember) Open(ctx context.Context, r driver.OpenRequest) (driver.OpenReply, error) {
	m.tries.Add(1)
	reply, err := m.Backend.Open(ctx, r)
	if err == nil {
		m.opens.Add(1)
	}
	return reply, err
}

func (m *zkMember) Inspect(ctx context.Context, r driver.InspectRequest) ([]driver.Holder, error) {
	m.inspects.Add(1)
	return m.Backend.Inspect(ctx, r)
}

// waitFair waits until ms own all n partitions fairly, looking again at
// every OnAssigned or OnRevoked (changed) and at each term's end; false if
// that did not happen within limit.
func waitFair(n int, ms []*zkMember, changed <-chan struct{}, limit time.Duration) bool {
	end := time.NewTimer(limit)
	defer end.Stop()
	lo, hi := n/len(ms), (n+len(ms)-1)/len(ms)
	for {
		total, fair := 0, true
		soonest := limit
		for _, m := range ms {
			ts := m.g.Terms()
			total += len(ts)
			fair = fair && len(ts) >= lo && len(ts) <= hi
			for _, t := range ts {
				soonest = min(soonest, t.Remaining())
			}
		}
		if fair && total == n {
			return true
		}
		expiry := time.NewTimer(soonest + time.Millisecond)
		select {
		case <-changed:
		case <-expiry.C:
		case <-end.C:
			expiry.Stop()
			return false
		}
		expiry.Stop()
	}
}

// wireCount counts the read requests a zksimba.Backend's connections
// send. go-zookeeper writes each request as one frame in one Write: a
// 4-byte length, then the xid and the opcode; the first frame of a
// connection is the connect request.
type wireCount struct {
	reads atomic.Int64
}

func (w *wireCount) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c, w: w}, nil
}

type countConn struct {
	net.Conn
	w         *wireCount
	mu        sync.Mutex
	connected bool
}

// ZooKeeper opcodes of the read requests.
const (
	zkOpExists       = 3
	zkOpGetData      = 4
	zkOpGetChildren  = 8
	zkOpSync         = 9
	zkOpGetChildren2 = 12
	zkOpMultiRead    = 22
)

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := !c.connected
	c.connected = true
	c.mu.Unlock()
	if !first && len(p) >= 12 {
		switch binary.BigEndian.Uint32(p[8:12]) {
		case zkOpExists, zkOpGetData, zkOpGetChildren, zkOpSync, zkOpGetChildren2, zkOpMultiRead:
			c.w.reads.Add(1)
		}
	}
	return c.Conn.Write(p)
}
