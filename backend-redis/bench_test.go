package redissimba_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Benchmarks run the backend side by side with the raw Redis operation it
// replaces, on the same server in the same run, so ratios are meaningful.
// Results and the command are in docs/bench/backend-redis.md.

// countingConn counts the bytes a client reads from Redis.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// benchClient is a standalone client that counts calls and bytes read.
func benchClient(b *testing.B) (redis.UniversalClient, *countCalls, *atomic.Int64) {
	b.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		b.Fatalf("%s is not set: run ./scripts/services.sh start and source .services/env", envAddr)
	}
	read := &atomic.Int64{}
	c := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, PoolSize: 4,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: conn, read: read}, nil
		},
	})
	h := &countCalls{}
	c.AddHook(h)
	return dial(b, c, envAddr), h, read
}

// op is one operation of an interleaved benchmark.
type op struct {
	name string
	run  func(i int)
}

// interleave runs every op once per iteration, rotating which goes first,
// and reports each op's median and mean latency. On a shared machine the
// load drifts between sub-benchmarks; interleaving puts every op under the
// same load, so the ratios hold even when the absolute figures move. The
// ratio metrics compare each op's median with the median of base.
func interleave(b *testing.B, base string, ops ...op) {
	b.Helper()
	lat := make([][]time.Duration, len(ops))
	for j := range lat {
		lat[j] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ops {
			j := (i + k) % len(ops)
			t0 := time.Now()
			ops[j].run(i)
			lat[j] = append(lat[j], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make(map[string]float64, len(ops))
	for j, o := range ops {
		l := lat[j]
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		sort.Slice(l, func(x, y int) bool { return l[x] < l[y] })
		p50[o.name] = float64(l[len(l)/2]) / 1e3
		b.ReportMetric(p50[o.name], o.name+"-p50-us")
		b.ReportMetric(float64(sum)/float64(len(l))/1e3, o.name+"-mean-us")
	}
	for _, o := range ops {
		if o.name != base {
			b.ReportMetric(p50[o.name]/p50[base], o.name+"/"+base)
		}
	}
}

func openBench(b *testing.B, be driver.Backend) driver.ID {
	b.Helper()
	r, err := be.Open(context.Background(), driver.OpenRequest{LeaseDuration: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close(context.Background(), r.ID) })
	return r.ID
}

// BenchmarkAcquire: an uncontended acquisition of a free name against a
// raw SET NX PX of a fresh key (goal: ≤ 1.2×).
func BenchmarkAcquire(b *testing.B) {
	c, _, _ := benchClient(b)
	ctx := context.Background()
	ns := namespace(b)
	be := newBackend(b, c, ns)
	id := openBench(b, be)
	names, keys := make([]string, b.N), make([]string, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
		keys[i] = fmt.Sprintf("bench:{%s}:raw:n%d", ns, i)
	}
	b.Cleanup(func() {
		for i := 0; i < len(keys); i += 1000 {
			_ = c.Del(ctx, keys[i:min(i+1000, len(keys))]...).Err()
		}
	})
	interleave(b, "raw",
		op{"raw", func(i int) {
			if ok, err := c.SetNX(ctx, keys[i], "owner", time.Minute).Result(); err != nil || !ok {
				b.Fatalf("SET NX: %v %v", ok, err)
			}
		}},
		op{"simba", func(i int) {
			res, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names[i : i+1]})
			if err != nil || res.Results[0].Token == 0 {
				b.Fatalf("Acquire: %v %+v", err, res)
			}
		}},
	)
}

// BenchmarkAcquireRelease: acquire + release of one name against a raw
// SET NX PX + DEL pair.
func BenchmarkAcquireRelease(b *testing.B) {
	c, _, _ := benchClient(b)
	ctx := context.Background()
	ns := namespace(b)
	be := newBackend(b, c, ns)
	id := openBench(b, be)
	key := "bench:{" + ns + "}:raw"
	names := []string{"x"}
	interleave(b, "raw",
		op{"raw", func(int) {
			if ok, err := c.SetNX(ctx, key, "owner", time.Minute).Result(); err != nil || !ok {
				b.Fatalf("SET NX: %v %v", ok, err)
			}
			if err := c.Del(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
		}},
		op{"simba", func(int) {
			res, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names})
			if err != nil || res.Results[0].Token == 0 {
				b.Fatalf("Acquire: %v %+v", err, res)
			}
			err = be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x", Token: res.Results[0].Token}}})
			if err != nil {
				b.Fatal(err)
			}
		}},
	)
}

// BenchmarkRenew: renewal of sessions holding 1, 100 and 10,000 leases
// (goal: latency(10,000) ≤ 3× latency(1)), interleaved with a raw PEXPIRE.
// "known-version" is the steady state (the owned set did not change);
// "full-list" is the renewal after a change, which lists every lease.
func BenchmarkRenew(b *testing.B) {
	c, calls, read := benchClient(b)
	ctx := context.Background()
	ns := namespace(b)
	be := newBackend(b, c, ns)
	sizes := []int{1, 100, 10000}
	ids := make([]driver.ID, len(sizes))
	versions := make([]uint64, len(sizes))
	for j, n := range sizes {
		ids[j] = openBench(b, be)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("s%d-lease-%05d", j, i)
		}
		if _, err := be.Acquire(ctx, driver.AcquireRequest{ID: ids[j], Names: names}); err != nil {
			b.Fatal(err)
		}
		full, err := be.Renew(ctx, driver.RenewRequest{ID: ids[j]})
		if err != nil || len(full.Leases) != n {
			b.Fatalf("Renew: %v, %d leases", err, len(full.Leases))
		}
		versions[j] = full.Version
	}
	key := "bench:{" + ns + "}:raw"
	if err := c.Set(ctx, key, "1", time.Minute).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Del(ctx, key).Err() })

	for _, mode := range []string{"known-version", "full-list"} {
		b.Run(mode, func(b *testing.B) {
			renew := func(j int) op {
				known := versions[j]
				if mode == "full-list" {
					known = 0
				}
				return op{fmt.Sprintf("leases=%d", sizes[j]), func(int) {
					if _, err := be.Renew(ctx, driver.RenewRequest{ID: ids[j], KnownVersion: known}); err != nil {
						b.Fatal(err)
					}
				}}
			}
			c0, r0 := calls.n.Load(), read.Load()
			interleave(b, "leases=1",
				op{"raw-PEXPIRE", func(int) {
					if err := c.PExpire(ctx, key, time.Minute).Err(); err != nil {
						b.Fatal(err)
					}
				}},
				renew(0), renew(1), renew(2))
			// Calls and bytes per renewal, over the three renewals and the
			// raw PEXPIRE of each iteration.
			b.ReportMetric(float64(calls.n.Load()-c0)/float64(4*b.N), "calls/renewal")
			b.ReportMetric(float64(read.Load()-r0)/float64(b.N), "replyB/iteration")
		})
	}
	// Reply bytes of each renewal alone.
	for j, n := range sizes {
		for _, known := range []uint64{versions[j], 0} {
			r0 := read.Load()
			if _, err := be.Renew(ctx, driver.RenewRequest{ID: ids[j], KnownVersion: known}); err != nil {
				b.Fatal(err)
			}
			b.Logf("leases=%d full=%v: %d reply bytes", n, known == 0, read.Load()-r0)
		}
	}
}

// pollingOnly hides the backend's Broadcaster, so candidates only poll.
type pollingOnly struct{ driver.Backend }

// BenchmarkHandover measures a voluntary handover: Stop on node A to
// OnElected on node B, each node its own client, session and election,
// with release broadcast and with polling only.
func BenchmarkHandover(b *testing.B) {
	cfg := deadline.Config{LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond}
	for _, mode := range []string{"broadcast", "polling"} {
		b.Run(mode, func(b *testing.B) {
			ns := namespace(b)
			type node struct {
				s       *session.Session
				e       *election.Election
				elected chan time.Time
				refused chan struct{}
			}
			nodes := make([]*node, 2)
			for i := range nodes {
				var be driver.Backend = newBackend(b, standalone(b), ns)
				if mode == "polling" {
					be = pollingOnly{be}
				}
				s, err := session.Open(context.Background(), be, session.WithConfig(cfg), session.WithLogger(nil))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				nodes[i] = &node{s: s, elected: make(chan time.Time, 1), refused: make(chan struct{}, 1)}
			}
			// start makes n a candidate and returns once its first attempt
			// has lost, so that it waits (on a notice or its next poll)
			// when the leader stops.
			start := func(n *node, wait bool) {
				e, err := election.Start(n.s, "leader", election.WithListener(election.Funcs{
					Elected: func(*term.Term) { n.elected <- time.Now() },
				}), election.OnAttempt(func(err error) {
					if err == nil {
						select {
						case n.refused <- struct{}{}:
						default:
						}
					}
				}))
				if err != nil {
					b.Fatal(err)
				}
				n.e = e
				if wait {
					select {
					case <-n.refused:
					case <-time.After(10 * time.Second):
						b.Fatal("candidate's first attempt did not lose within 10s")
					}
				}
			}
			start(nodes[0], false)
			awaitElected(b, nodes[0].elected)
			start(nodes[1], true)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				from, to := nodes[i%2], nodes[(i+1)%2]
				t0 := time.Now()
				if err := from.e.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, awaitElected(b, to.elected).Sub(t0))
				b.StopTimer()
				start(from, true) // the old leader becomes the next candidate
				b.StartTimer()
			}
			b.StopTimer()
			for _, n := range nodes {
				_ = n.e.Stop(context.Background())
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10])/1e6, "p90-ms")
		})
	}
}

func awaitElected(b *testing.B, ch chan time.Time) time.Time {
	b.Helper()
	select {
	case t := <-ch:
		return t
	case <-time.After(10 * time.Second):
		b.Fatal("no OnElected within 10s")
		return time.Time{}
	}
}

// BenchmarkServerTime reports the Redis server's time per acquire +
// release (INFO commandstats: the usec of evalsha and fcall), on a private
// redis-server with nothing else on it: the acquire function (ADR 0148)
// against the acquire script, which a backend whose ACL user may not call
// FCALL runs, with its INFO server per call. The two alternate in blocks
// of 1,000 pairs; b.N is the number of blocks of each.
func BenchmarkServerTime(b *testing.B) {
	s := startServer(b)
	admin := s.client(s.addr())
	if err := admin.Do(ctxT(b), "ACL", "SETUSER", "nofn", "on", "nopass", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		b.Fatal(err)
	}
	script := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "nofn", Password: "any", ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = script.Close() })
	type side struct {
		name string
		b    *redissimba.Backend
		id   driver.ID
		usec float64
	}
	sides := []*side{{name: "function", b: newBackend(b, admin, namespace(b))}, {name: "script", b: newBackend(b, script, namespace(b))}}
	const block = 1000
	pairs := func(sd *side) {
		for range block {
			r, err := sd.b.Acquire(ctxT(b), driver.AcquireRequest{ID: sd.id, Names: []string{"x"}})
			if err != nil || r.Results[0].Token == 0 {
				b.Fatalf("%s acquire: %+v, %v", sd.name, r, err)
			}
			if err := sd.b.Release(ctxT(b), driver.ReleaseRequest{ID: sd.id, Leases: []driver.Lease{{Name: "x", Token: r.Results[0].Token}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	usec := func() float64 {
		st, err := admin.Info(ctxT(b), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for _, l := range strings.Split(st, "\r\n") {
			if !strings.HasPrefix(l, "cmdstat_evalsha:") && !strings.HasPrefix(l, "cmdstat_fcall:") {
				continue
			}
			for _, f := range strings.Split(l[strings.IndexByte(l, ':')+1:], ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					total += x
				}
			}
		}
		return total
	}
	for _, sd := range sides {
		r, err := sd.b.Open(ctxT(b), driver.OpenRequest{LeaseDuration: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		sd.id = r.ID
		pairs(sd) // warm: the function's library loaded, its run_id cached
	}
	b.ResetTimer()
	for range b.N {
		for _, sd := range sides {
			if err := admin.ConfigResetStat(ctxT(b)).Err(); err != nil {
				b.Fatal(err)
			}
			pairs(sd)
			sd.usec += usec()
		}
	}
	for _, sd := range sides {
		b.ReportMetric(sd.usec/float64(b.N*block), sd.name+"-server-us/pair")
	}
}
