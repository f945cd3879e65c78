package zksimba_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// Benchmarks run against the shared standalone server (SIMBA_ZK_SERVERS);
// docs/bench/backend-zk.md has the command and the results.

// BenchmarkUncontended compares one Simba acquire + release of a free name
// with the raw ZooKeeper operations it stands for: create an ephemeral
// node, then delete it, on a plain go-zookeeper connection.
func BenchmarkUncontended(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	b.Run("simba-acquire-release", func(b *testing.B) {
		be := newBackend(b, srv, root)
		s := open(b, be, 20*time.Second)
		keepAlive(b, be, s.ID, 2*time.Second)
		ctx := context.Background()
		names := []string{"x"}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r, err := be.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: names})
			if err != nil || r.Results[0].Token == 0 {
				b.Fatalf("Acquire: %+v, %v", r, err)
			}
			if err := be.Release(ctx, driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: "x", Token: r.Results[0].Token}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-create-delete", func(b *testing.B) {
		conn := rawConn(b, srv)
		path := root + "/raw"
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := conn.Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				b.Fatal(err)
			}
			if err := conn.Delete(path, -1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUncontendedInterleaved runs the same comparison with both
// operations in every iteration, alternating which goes first, so that the
// load of a shared machine falls on both alike. Reported: the median of
// each, and the ratio of the medians (goal ≤ 1.2).
func BenchmarkUncontendedInterleaved(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	be := newBackend(b, srv, root)
	s := open(b, be, 20*time.Second)
	keepAlive(b, be, s.ID, 2*time.Second)
	conn := rawConn(b, srv)
	ctx := context.Background()
	names, raw := []string{"x"}, root+"/raw"
	simbaOp := func() {
		r, err := be.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: names})
		if err != nil || r.Results[0].Token == 0 {
			b.Fatalf("Acquire: %+v, %v", r, err)
		}
		if err := be.Release(ctx, driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: "x", Token: r.Results[0].Token}}}); err != nil {
			b.Fatal(err)
		}
	}
	rawOp := func() {
		if _, err := conn.Create(raw, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			b.Fatal(err)
		}
		if err := conn.Delete(raw, -1); err != nil {
			b.Fatal(err)
		}
	}
	simbaOp() // creates the root
	var st, rt []time.Duration
	timed := func(f func(), into *[]time.Duration) {
		t0 := time.Now()
		f()
		*into = append(*into, time.Since(t0))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			timed(simbaOp, &st)
			timed(rawOp, &rt)
		} else {
			timed(rawOp, &rt)
			timed(simbaOp, &st)
		}
	}
	b.StopTimer()
	slices.Sort(st)
	slices.Sort(rt)
	ms, mr := st[len(st)/2], rt[len(rt)/2]
	b.ReportMetric(float64(ms.Microseconds())/1000, "simba-p50-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "raw-p50-ms")
	b.ReportMetric(float64(ms)/float64(mr), "ratio-p50")
}

// BenchmarkRenew compares the renewal (a multi with one check, through the
// leader) with a plain exists, the cheapest request a session can send.
func BenchmarkRenew(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	b.Run("simba-renew", func(b *testing.B) {
		be := newBackend(b, srv, root)
		s := open(b, be, 20*time.Second)
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := be.Renew(ctx, driver.RenewRequest{ID: s.ID, KnownVersion: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-exists", func(b *testing.B) {
		conn := rawConn(b, srv)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := conn.Exists(root); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandover measures a voluntary handover at the backend level:
// the holder releases, the candidate's exists watch fires, the candidate
// acquires. Reported: p50 and p90 from the release call to the
// candidate's successful acquire.
func BenchmarkHandover(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	be1, be2 := newBackend(b, srv, root), newBackend(b, srv, root)
	s1, s2 := open(b, be1, 20*time.Second), open(b, be2, 20*time.Second)
	keepAlive(b, be1, s1.ID, 2*time.Second)
	keepAlive(b, be2, s2.ID, 2*time.Second)
	n1, n2 := notices(b, be1, "x"), notices(b, be2, "x")
	ctx := context.Background()
	type side struct {
		be      interface{ driver.Backend }
		id      driver.ID
		notices <-chan driver.Notice
	}
	holder, cand := side{be1, s1.ID, n1}, side{be2, s2.ID, n2}
	tok := acquire(b, be1, s1.ID, "x")[0].Token
	if tok == 0 {
		b.Fatal("x not free")
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// The candidate's failed attempt arms its watch.
		if r, err := cand.be.Acquire(ctx, driver.AcquireRequest{ID: cand.id, Names: []string{"x"}}); err != nil || r.Results[0].Token != 0 {
			b.Fatalf("candidate acquire: %+v, %v", r, err)
		}
		for len(cand.notices) > 0 {
			<-cand.notices // stale notices from earlier rounds
		}
		start := time.Now()
		if err := holder.be.Release(ctx, driver.ReleaseRequest{ID: holder.id, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-cand.notices:
		case <-time.After(5 * time.Second):
			b.Fatal("no notice within 5s")
		}
		r, err := cand.be.Acquire(ctx, driver.AcquireRequest{ID: cand.id, Names: []string{"x"}})
		if err != nil || r.Results[0].Token <= tok {
			b.Fatalf("candidate takeover: %+v, %v", r, err)
		}
		lat = append(lat, time.Since(start))
		tok = r.Results[0].Token
		holder, cand = cand, holder
	}
	b.StopTimer()
	reportPercentiles(b, lat, "handover")
}

// BenchmarkCrashFailover cuts the holder's connection (as a crash or a
// partition would) and measures how long the waiting candidate takes to
// win the lease, as a multiple of the negotiated session timeout. Each
// iteration lasts about one timeout: run it with -benchtime 5x. The
// server expires sessions on its tick (200 ms on the test servers), which
// costs up to one tick on top of the timeout.
func BenchmarkCrashFailover(b *testing.B) {
	for _, timeout := range []time.Duration{2 * time.Second, 5 * time.Second} {
		b.Run("timeout="+timeout.String(), func(b *testing.B) { crashFailover(b, timeout) })
	}
}

func crashFailover(b *testing.B, timeout time.Duration) {
	srv, root := standalone(b), newRoot(b)
	cb := newBackend(b, srv, root)
	cs := open(b, cb, timeout)
	keepAlive(b, cb, cs.ID, timeout/5)
	freed := notices(b, cb, "x")
	ratios := make([]time.Duration, 0, b.N) // in units of timeout/1000
	for i := 0; i < b.N; i++ {
		cut := &cutter{}
		hb := newBackend(b, srv, root, withDial(cut))
		hs := open(b, hb, timeout)
		if tok := acquire(b, hb, hs.ID, "x")[0].Token; tok == 0 {
			b.Fatal("holder could not take x")
		}
		if tok := acquire(b, cb, cs.ID, "x")[0].Token; tok != 0 {
			b.Fatal("candidate took a held lease")
		}
		renew(b, hb, hs.ID)
		for len(freed) > 0 {
			<-freed
		}
		cut.Cut()
		start := time.Now()
		select {
		case <-freed:
		case <-time.After(3 * timeout):
			_, err := cb.Renew(context.Background(), driver.RenewRequest{ID: cs.ID})
			b.Fatalf("no takeover within 3 timeouts (candidate session renew: %v)", err)
		}
		tok := acquire(b, cb, cs.ID, "x")[0].Token
		el := time.Since(start)
		if tok == 0 {
			b.Fatal("candidate did not win after the notice")
		}
		ratios = append(ratios, el*1000/timeout)
		if err := cb.Release(context.Background(), driver.ReleaseRequest{ID: cs.ID, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(ratios[len(ratios)/2])/1000, "x-timeout-p50")
	b.ReportMetric(float64(ratios[len(ratios)-1])/1000, "x-timeout-max")
}

func reportPercentiles(b *testing.B, lat []time.Duration, name string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, name+"-p90-ms")
}

func rawConn(b testing.TB, srv []string) *zk.Conn {
	b.Helper()
	conn, _, err := zk.Connect(srv, 20*time.Second, zk.WithLogInfo(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	if _, _, err := conn.Exists("/"); err != nil {
		b.Fatal(err)
	}
	return conn
}

// BenchmarkNamesEverUsed (issue 23): the ensemble's storage and one
// acquire + release of a fresh name after 1 and 10,000 distinct names
// were ever acquired and released (10⁶ with SIMBA_BENCH_NAMES=1000000:
// about 8 minutes on a loaded 2-core machine). The names are driven
// through the backend's API in batches of 1,000 (cycleNames), as a service
// with a lock per entity would. Reported per level: the nodes under the
// root before anything and now (a constant: root, @epoch, its identity,
// @delay), and the process's live heap after a GC (the per-name map that
// grew with every name is gone, ADR 0255).
func BenchmarkNamesEverUsed(b *testing.B) {
	srv, root := standalone(b), newRoot(b)
	be := newBackend(b, srv, root)
	s := open(b, be, 20*time.Second)
	keepAlive(b, be, s.ID, 2*time.Second)
	raw := rawConn(b, srv)
	before := nodeCount(b, raw, root)
	used := 0
	for _, n := range namesLevels() {
		cycleNames(b, be, s.ID, "ever-", used, n-used, 0)
		used = n
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("fresh-%d-%d", n, i)
				r, err := be.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{name}})
				if err != nil || r.Results[0].Token == 0 {
					b.Fatalf("Acquire: %+v, %v", r, err)
				}
				if err := be.Release(ctx, driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: name, Token: r.Results[0].Token}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(before), "nodes-before")
			b.ReportMetric(float64(nodeCount(b, raw, root)), "nodes-after")
			b.ReportMetric(float64(liveHeap())/(1<<20), "heap-MiB")
		})
	}
}

// namesLevels are the numbers of names ever used BenchmarkNamesEverUsed
// measures at: 1 and 10⁴, and SIMBA_BENCH_NAMES (10⁶, say) if set.
func namesLevels() []int {
	levels := []int{1, 10_000}
	if v, err := strconv.Atoi(os.Getenv("SIMBA_BENCH_NAMES")); err == nil && v > levels[len(levels)-1] {
		levels = append(levels, v)
	}
	return levels
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
