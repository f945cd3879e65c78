package etcdsimba_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// BenchmarkNamesEverUsed (issue 23): the namespace's storage and one
// acquire + release of a fresh name after 1 and 10,000 distinct names
// were ever acquired and released (more with SIMBA_BENCH_NAMES, e.g.
// 1000000: hours on a loaded machine whose etcd fsyncs each transaction).
// The names are driven through the backend's API in batches of 1,000
// (cycleNames), as a service with a lock per entity would. Reported per
// level: the keys under the namespace before anything and now (a
// constant: the epoch record and the session's key), etcd's database
// size (its MVCC history keeps deleted revisions until the cluster is
// compacted, as for every etcd client), and the process's live heap after
// a GC (the per-name map that grew with every name is gone, ADR 0255).
// In its own file: bench_test.go is shared with the etcd performance work.
func BenchmarkNamesEverUsed(b *testing.B) {
	cli := newClient(b, single(b))
	ns := newNamespace(b)
	be := newBackend(b, cli, ns)
	id := openDriver(b, be, 20*time.Second)
	keepRenewing(b, be, id, 2*time.Second)
	before := keyCount(b, cli, ns)
	used := 0
	for _, n := range namesLevels() {
		cycleNames(b, be, id, "ever-", used, n-used, 0)
		used = n
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("fresh-%d-%d", n, i)
				r, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{name}})
				if err != nil || r.Results[0].Token == 0 {
					b.Fatalf("Acquire: %+v, %v", r, err)
				}
				if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: r.Results[0].Token}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(before), "keys-before")
			b.ReportMetric(float64(keyCount(b, cli, ns)), "keys-after")
			st, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctxT(b, 5*time.Second), &pb.StatusRequest{})
			if err == nil {
				b.ReportMetric(float64(st.DbSizeInUse)/(1<<20), "db-inuse-MiB")
			}
			b.ReportMetric(float64(liveHeap())/(1<<20), "heap-MiB")
		})
	}
}

// namesLevels are the numbers of names ever used BenchmarkNamesEverUsed
// measures at: 1 and 10⁴, and SIMBA_BENCH_NAMES if set and higher.
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
