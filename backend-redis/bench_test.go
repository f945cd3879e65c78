package redissimba_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
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

// floorLib holds what an acquire + release pair costs the server with no
// Lua work of Simba's own (ADR 0315): floor_acquire runs the commands the
// acquire of a free name runs, floor_release those of its release, with
// the same keys and arguments and constant values; floor_empty returns at
// once (the cost of calling a function with those keys and arguments).
const floorLib = `#!lua name=simba_bench_floor
redis.register_function('floor_acquire', function(KEYS, ARGV)
  redis.call('HGET', KEYS[1], '#v')
  redis.call('TIME')
  redis.call('INFO', 'replication')
  redis.call('GET', KEYS[3])
  redis.pcall('HMGET', KEYS[6], 'h', 'y', 'v')
  redis.call('EXISTS', KEYS[4])
  redis.call('GET', KEYS[5])
  redis.call('SET', KEYS[5], '1796186422010615')
  redis.call('HSET', KEYS[1], ARGV[6], '1796186422010615', '#v', '2')
  redis.call('HSET', KEYS[4], 's', ARGV[1], 't', '1796186422010615')
  redis.call('ZADD', KEYS[2], 0, ARGV[6])
  return {'1796186422010615'}
end)
redis.register_function('floor_release', function(KEYS, ARGV)
  redis.call('HMGET', KEYS[2], 's', 't', 'w', 'd')
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[1], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('HINCRBY', KEYS[1], '#v', 1)
  return 1
end)
redis.register_function('floor_empty', function(KEYS, ARGV)
  return {'1796186422010615'}
end)
`

// BenchmarkServerFloor (issue 23, ADR 0315): server time per acquire +
// release of a free name (INFO commandstats, private server), the
// backend's (the acquire function and the release script) against the
// floor: the same commands with no Lua work (floorLib), a function called
// with the same keys and arguments that returns at once, and the raw pair
// (SET NX PX + DEL). Blocks of 1,000 pairs of each, in turn; b.N blocks of
// each.
func BenchmarkServerFloor(b *testing.B) {
	s := startServer(b)
	c := s.client(s.addr())
	ctx := ctxT(b)
	if err := c.FunctionLoadReplace(ctx, floorLib).Err(); err != nil {
		b.Fatal(err)
	}
	ns := namespace(b)
	be := newBackend(b, c, ns)
	r, err := be.Open(ctx, driver.OpenRequest{LeaseDuration: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	pre := "simba:{" + ns + "}:"
	acqKeys := []string{pre + "s:" + string(r.ID), pre + "names", pre + "epoch", pre + "l:x", pre + "hw", pre + "lineage"}
	acqArgs := []any{string(r.ID), pre + "s:", 30000, 1, "1", "x", 0, 30000, 0}
	relKeys := []string{pre + "s:" + string(r.ID), pre + "l:x", pre + "names"}
	relArgs := []any{string(r.ID), pre + "rel", "x", "1796186422010615"}
	const block = 1000
	cases := []struct {
		name string
		pair func()
		cmds []string // the top-level commands it sends
		usec float64
	}{
		{name: "simba", pair: func() {
			rep, err := be.Acquire(ctx, driver.AcquireRequest{ID: r.ID, Names: []string{"x"}})
			if err != nil || rep.Results[0].Token == 0 {
				b.Fatalf("acquire: %+v, %v", rep, err)
			}
			if err := be.Release(ctx, driver.ReleaseRequest{ID: r.ID, Leases: []driver.Lease{{Name: "x", Token: rep.Results[0].Token}}}); err != nil {
				b.Fatal(err)
			}
		}, cmds: []string{"fcall", "evalsha"}},
		{name: "commands", pair: func() {
			if err := c.FCall(ctx, "floor_acquire", acqKeys, acqArgs...).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.FCall(ctx, "floor_release", relKeys, relArgs...).Err(); err != nil {
				b.Fatal(err)
			}
		}, cmds: []string{"fcall"}},
		{name: "call", pair: func() {
			if err := c.FCall(ctx, "floor_empty", acqKeys, acqArgs...).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.FCall(ctx, "floor_empty", relKeys, relArgs...).Err(); err != nil {
				b.Fatal(err)
			}
		}, cmds: []string{"fcall"}},
		{name: "raw", pair: func() {
			if err := c.SetNX(ctx, pre+"raw", "v", 15*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.Del(ctx, pre+"raw").Err(); err != nil {
				b.Fatal(err)
			}
		}, cmds: []string{"set", "del"}},
	}
	// The time of a case's top-level commands (for simba the release
	// script's EVALSHA includes the sweep's every 64th Acquire, ADR 0245).
	top := func(cmds []string) float64 {
		st, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for _, l := range strings.Split(st, "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
			if !ok || !slices.Contains(cmds, name) {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					total += x
				}
			}
		}
		return total
	}
	for _, cs := range cases {
		for range 100 {
			cs.pair() // warm: the library loaded, its run_id cached
		}
	}
	b.ResetTimer()
	for range b.N {
		for i := range cases {
			cs := &cases[i]
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for range block {
				cs.pair()
			}
			cs.usec += top(cs.cmds)
		}
	}
	b.StopTimer()
	for _, cs := range cases {
		b.ReportMetric(cs.usec/float64(b.N*block), cs.name+"-us/pair")
	}
}

// storage is what a namespace costs its server: the keys, the bytes Redis
// says they take (MEMORY USAGE, summed over a SCAN of the namespace) and
// the server's used_memory.
type storage struct {
	dbsize, keys, nsBytes, usedMemory int64
}

func measureStorage(b *testing.B, c *redis.Client, ns string) storage {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a million keys take a while
	defer cancel()
	var st storage
	var err error
	if st.dbsize, err = c.DBSize(ctx).Result(); err != nil {
		b.Fatal(err)
	}
	var cursor uint64
	for {
		page, next, err := c.Scan(ctx, cursor, "simba:{"+ns+"}:*", 10000).Result()
		if err != nil {
			b.Fatal(err)
		}
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range page {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		for _, cmd := range cmds {
			n, _ := cmd.(*redis.IntCmd).Result()
			st.keys++
			st.nsBytes += n
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			st.usedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return st
}

func (s storage) String() string {
	return fmt.Sprintf("DBSIZE %d, namespace keys %d, MEMORY USAGE %d B, used_memory %d B", s.dbsize, s.keys, s.nsBytes, s.usedMemory)
}

// BenchmarkNamesEverUsed (issue 23): a lock per entity, each name used
// once. On a private server, the namespace's storage before any name, after
// 10^6 distinct names acquired and closed, and after 10^4 more whose
// session expired and the Acquires that sweep them; and the cost of an
// acquire + release of a fresh name once 1, 10^4 and 10^6 names have been
// used: p50 latency and server time per pair (INFO commandstats). The names
// are used in bulk to reach 10^6 quickly: one session acquires 10,000
// distinct names in one Acquire, then closes, 100 times over.
func BenchmarkNamesEverUsed(b *testing.B) {
	s := startServer(b)
	c := s.client(s.addr()).(*redis.Client)
	ns := namespace(b)
	be := newBackend(b, c, ns)
	ctx := context.Background()
	used := 0
	bulk := func(n int, lease time.Duration, end func(id driver.ID)) {
		for n > 0 {
			k := min(n, 10000)
			r, err := be.Open(ctx, driver.OpenRequest{LeaseDuration: lease})
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, k)
			for i := range names {
				names[i] = "order:" + strconv.Itoa(used+i)
			}
			rep, err := be.Acquire(ctx, driver.AcquireRequest{ID: r.ID, Names: names})
			if err != nil || rep.Results[k-1].Token == 0 {
				b.Fatalf("bulk acquire: %v", err)
			}
			end(r.ID)
			used += k
			n -= k
		}
	}
	closeIt := func(id driver.ID) {
		if err := be.Close(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	before := measureStorage(b, c, ns)
	b.Logf("before any name: %v", before)
	serverUS := func() float64 {
		st, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for _, l := range strings.Split(st, "\r\n") {
			// The scripts' and functions' time includes the commands they
			// run; the others are the sweep's read of the index.
			if !strings.HasPrefix(l, "cmdstat_evalsha:") && !strings.HasPrefix(l, "cmdstat_eval:") && !strings.HasPrefix(l, "cmdstat_fcall:") && !strings.HasPrefix(l, "cmdstat_zrangebylex:") {
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
	var id driver.ID
	for _, level := range []int{1, 10000, 1000000} {
		bulk(level-used, time.Minute, closeIt)
		b.Logf("after %d names acquired and closed: %v", used, measureStorage(b, c, ns))
		id = openBench(b, be) // after the bulk, which may outlast a maximum lease
		b.Run(fmt.Sprintf("used=%d", level), func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			base := serverUS()
			b.ResetTimer()
			for i := range b.N {
				name := "fresh:" + strconv.Itoa(level) + ":" + strconv.Itoa(i)
				t0 := time.Now()
				r, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{name}})
				if err != nil || r.Results[0].Token == 0 {
					b.Fatalf("acquire: %+v, %v", r, err)
				}
				if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: r.Results[0].Token}}}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(x, y int) bool { return lat[x] < lat[y] })
			b.ReportMetric(float64(lat[len(lat)/2])/1e3, "pair-p50-us")
			b.ReportMetric((serverUS()-base)/float64(b.N), "server-us/pair")
		})
	}
	after := measureStorage(b, c, ns)
	b.Logf("after %d names acquired and closed: %v", used, after)
	// Names whose session expired: their records stay until the sweep,
	// which every 64th Acquire runs over the next 64 indexed names.
	var dead []driver.ID
	bulk(10000, time.Second, func(id driver.ID) { dead = append(dead, id) })
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := c.Exists(ctx, "simba:{"+ns+"}:s:"+string(dead[0])).Result()
		if err != nil || time.Now().After(deadline) {
			b.Fatalf("the bulk session did not expire: %d, %v", n, err)
		}
		if n == 0 {
			break
		}
		<-time.After(50 * time.Millisecond)
	}
	expired := measureStorage(b, c, ns)
	id = openBench(b, be)
	calls := 0
	for {
		r, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"busy"}})
		if err != nil || r.Results[0].Token == 0 {
			b.Fatalf("acquire: %+v, %v", r, err)
		}
		calls++
		if calls%1000 == 0 {
			if n, err := c.ZCard(ctx, "simba:{"+ns+"}:names").Result(); err != nil || n <= 1 {
				break
			}
		}
		if calls > 1000000 {
			b.Fatal("the sweep never caught up")
		}
	}
	swept := measureStorage(b, c, ns)
	if err := be.Close(ctx, id); err != nil {
		b.Fatal(err)
	}
	final := measureStorage(b, c, ns)
	b.Logf("10,000 names of an expired session: %v; after %d Acquires (sweeping): %v; after the last session closed: %v", expired, calls, swept, final)
	b.ReportMetric(float64(after.keys-before.keys), "keys-after-1e6-names")
	b.ReportMetric(float64(after.nsBytes-before.nsBytes), "ns-bytes-after-1e6-names")
	b.ReportMetric(float64(after.usedMemory-before.usedMemory), "used-memory-delta-B")
	b.ReportMetric(float64(calls), "acquires-to-sweep-1e4-expired")
}
