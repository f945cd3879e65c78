package sqltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Bench is a dialect for the benchmarks: Simba's operations side by side
// with the raw single-row statements on the same server, in one run.
type Bench struct {
	Harness Harness
	// NewClient returns a new client (its own Backend value, and on
	// PostgreSQL its own LISTEN connection) in the namespace prefix.
	NewClient func(b *testing.B, prefix string) driver.Backend
	// Raw returns the raw upsert and delete of one row, on a table it
	// creates (and drops when b ends).
	Raw func(b *testing.B) (upsert func(ctx context.Context, name, owner string, token int64) error, del func(ctx context.Context, name string) error)
}

// RunAcquireRelease: an uncontended acquire + release of one lease, and
// the raw single-row upsert + delete.
func RunAcquireRelease(b *testing.B, bh Bench) {
	b.Run("simba", func(b *testing.B) {
		be := bh.NewClient(b, "")
		id := Open(b, be, time.Minute)
		ctx := context.Background()
		lease := []driver.Lease{{Name: "bench"}}
		req := driver.AcquireRequest{ID: id, Names: []string{"bench"}}
		b.ResetTimer()
		for b.Loop() {
			rep, err := be.Acquire(ctx, req)
			if err != nil || rep.Results[0].Token == 0 {
				b.Fatalf("Acquire = %+v, %v", rep, err)
			}
			lease[0].Token = rep.Results[0].Token
			if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: lease}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		upsert, del := bh.Raw(b)
		ctx := context.Background()
		owner := fmt.Sprintf("%032x", 1)
		var i int64
		b.ResetTimer()
		for b.Loop() {
			i++
			if err := upsert(ctx, "bench", owner, i); err != nil {
				b.Fatal(err)
			}
			if err := del(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// RunAcquireReleaseInterleaved alternates the two in one loop, one Simba
// acquire + release then one raw upsert + delete per iteration, so that
// the load of a shared machine falls on both alike, and reports the
// medians and their ratio.
func RunAcquireReleaseInterleaved(b *testing.B, bh Bench) {
	be := bh.NewClient(b, "")
	id := Open(b, be, time.Minute)
	upsert, del := bh.Raw(b)
	ctx := context.Background()
	owner := fmt.Sprintf("%032x", 1)
	req := driver.AcquireRequest{ID: id, Names: []string{"bench"}}
	var simba, raw []time.Duration
	var i int64
	for b.Loop() {
		t0 := time.Now()
		rep, err := be.Acquire(ctx, req)
		if err != nil || rep.Results[0].Token == 0 {
			b.Fatalf("Acquire = %+v, %v", rep, err)
		}
		if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "bench", Token: rep.Results[0].Token}}}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		i++
		if err := upsert(ctx, "bench", owner, i); err != nil {
			b.Fatal(err)
		}
		if err := del(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		simba, raw = append(simba, t1.Sub(t0)), append(raw, time.Since(t1))
	}
	slices.Sort(simba)
	slices.Sort(raw)
	ms, mr := simba[len(simba)/2], raw[len(raw)/2]
	b.ReportMetric(float64(ms)/float64(time.Microsecond), "simba-p50-µs")
	b.ReportMetric(float64(mr)/float64(time.Microsecond), "raw-p50-µs")
	b.ReportMetric(float64(ms)/float64(mr), "ratio")
}

// RunRenew: one renewal of a session that owns n leases, at a known
// version (the steady state: nothing listed) and in full (the owned set
// changed: every lease listed). Reports round trips and bytes per renewal.
func RunRenew(b *testing.B, bh Bench) {
	for _, n := range []int{1, 100, 10000} {
		var wc WireCounter
		be := bh.Harness.NewCounted(b, &wc)
		id := Open(b, be, 10*time.Minute)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("lease-%05d", i)
		}
		if _, err := be.Acquire(Ctx(b), driver.AcquireRequest{ID: id, Names: names}); err != nil {
			b.Fatal(err)
		}
		r, err := be.Renew(Ctx(b), driver.RenewRequest{ID: id})
		if err != nil || len(r.Leases) != n {
			b.Fatalf("Renew = %d leases, %v; want %d", len(r.Leases), err, n)
		}
		for _, mode := range []string{"known", "full"} {
			known := r.Version
			if mode == "full" {
				known = 0
			}
			b.Run(fmt.Sprintf("leases=%d/%s", n, mode), func(b *testing.B) {
				ctx := context.Background()
				wc.Reset()
				b.ResetTimer()
				for b.Loop() {
					if _, err := be.Renew(ctx, driver.RenewRequest{ID: id, KnownVersion: known}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				ops := float64(b.N)
				b.ReportMetric(float64(wc.Trips.Load())/ops, "trips/op")
				b.ReportMetric(float64(wc.Sent.Load())/ops, "sent-B/op")
				b.ReportMetric(float64(wc.Received.Load())/ops, "recv-B/op")
			})
		}
	}
}

// RunHandover: a voluntary handover between two clients, each with its
// own session and election on one name: from Stop on the leader to
// OnElected on the candidate. Reports the p50 and p90 in milliseconds.
// Candidates retry every RenewInterval/2 plus jitter (here 0.5 s to 1 s),
// so without a broadcast the handover waits for that poll; each Stop comes
// at a random phase of the candidate's polling. ns/op is meaningless here
// (it includes the waits for that phase); run it with -benchtime 30x.
func RunHandover(b *testing.B, bh Bench) {
	prefix := FreshPrefix()
	cfg := deadline.Config{LeaseDuration: 3 * time.Second, RenewInterval: time.Second}
	type node struct {
		s        *session.Session
		e        *election.Election
		elected  chan time.Time
		attempts chan struct{}
	}
	nodes := make([]*node, 2)
	for i := range nodes {
		be := bh.NewClient(b, prefix)
		s, err := session.Open(Ctx(b), be, session.WithConfig(cfg), session.WithLogger(nil))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		nodes[i] = &node{s: s, elected: make(chan time.Time, 4), attempts: make(chan struct{}, 64)}
	}
	start := func(n *node) {
		for len(n.attempts) > 0 {
			<-n.attempts
		}
		e, err := election.Start(n.s, "handover", election.WithListener(election.Funcs{
			Elected: func(*term.Term) { n.elected <- time.Now() },
		}), election.OnAttempt(func(error) {
			select {
			case n.attempts <- struct{}{}:
			default:
			}
		}))
		if err != nil {
			b.Fatal(err)
		}
		n.e = e
	}
	await := func(n *node) time.Time {
		select {
		case at := <-n.elected:
			return at
		case <-time.After(20 * time.Second):
			b.Fatal("no OnElected within 20s")
			return time.Time{}
		}
	}
	start(nodes[0])
	await(nodes[0])
	start(nodes[1])
	leader := 0
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		l, c := nodes[leader], nodes[1-leader]
		// Stop at a random phase of the candidate's polling, as in life:
		// after its first periodic attempt, wait a random part of a period.
		// (The timer keeps running: stopping it would make the framework
		// run hundreds of these slow iterations to fill -benchtime.)
		for range 2 { // the attempt at Start, then a periodic one
			select {
			case <-c.attempts:
			case <-time.After(20 * time.Second):
				b.Fatal("candidate made no attempt within 20s")
			}
		}
		<-time.After(time.Duration(rand.Int64N(int64(cfg.RenewInterval))))
		t0 := time.Now()
		if err := l.e.Stop(Ctx(b)); err != nil {
			b.Fatal(err)
		}
		took = append(took, await(c).Sub(t0))
		start(l) // the old leader competes again, as a candidate
		leader = 1 - leader
	}
	for _, n := range nodes {
		_ = n.e.Stop(Ctx(b))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10])/float64(time.Millisecond), "p90-ms")
}

// RunHandoverBackend is the backend-level handover, without the engine:
// A releases, then B acquires as soon as it learns the lease is free —
// from a release notice where the backend broadcasts (subscribe is not
// nil), else by polling Acquire every poll. Reports the p50 and p90 in
// milliseconds from the release call to B's successful Acquire.
func RunHandoverBackend(b *testing.B, bh Bench, subscribe func(be driver.Backend, fn func(driver.Notice)) (stop func()), poll time.Duration) {
	prefix := FreshPrefix()
	ba, bb := bh.NewClient(b, prefix), bh.NewClient(b, prefix)
	ida, idb := Open(b, ba, time.Minute), Open(b, bb, time.Minute)
	notices := make(chan string, 64)
	if subscribe != nil {
		stop := subscribe(bb, func(n driver.Notice) {
			select {
			case notices <- n.Name:
			default:
			}
		})
		b.Cleanup(stop)
	}
	ctx := context.Background()
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		tok := Acquire(b, ba, ida, "handover")
		if tok == 0 {
			b.Fatal("A could not acquire")
		}
		for len(notices) > 0 {
			<-notices
		}
		b.StartTimer()
		t0 := time.Now()
		if err := ba.Release(ctx, driver.ReleaseRequest{ID: ida, Leases: []driver.Lease{{Name: "handover", Token: tok}}}); err != nil {
			b.Fatal(err)
		}
		var won uint64
		// Without notices, B polls every poll, and the release falls at a
		// random phase of that: its next poll comes after a random part
		// of a period.
		wait := time.Duration(0)
		if poll > 0 {
			wait = time.Duration(rand.Int64N(int64(poll)))
		}
		for won == 0 {
			if subscribe != nil {
				select {
				case <-notices:
				case <-time.After(20 * time.Second):
					b.Fatal("no release notice within 20s")
				}
			} else {
				<-time.After(wait)
				wait = poll
			}
			rep, err := bb.Acquire(ctx, driver.AcquireRequest{ID: idb, Names: []string{"handover"}})
			if err != nil {
				b.Fatal(err)
			}
			won = rep.Results[0].Token
		}
		took = append(took, time.Since(t0))
		b.StopTimer()
		if err := bb.Release(ctx, driver.ReleaseRequest{ID: idb, Leases: []driver.Lease{{Name: "handover", Token: won}}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10])/float64(time.Millisecond), "p90-ms")
}

// Storage reads what a namespace's tables hold: their rows (every table
// of the namespace) and their size on the server in bytes (PostgreSQL:
// pg_total_relation_size; MariaDB: information_schema's data_length +
// index_length). vacuum, when true, first lets the server reclaim what
// deleted rows left (PostgreSQL: VACUUM; MariaDB: ANALYZE TABLE, so the
// statistics are fresh).
type Storage func(b *testing.B, prefix string, vacuum bool) (rows, bytes int64)

// bulkBatch is the names per Acquire of RunNamesEverUsed's setup.
const bulkBatch = 2000

// RunNamesEverUsed: the cost of an acquire + release of a name never used
// before (a lock per entity), in a namespace where 1, 10⁴ or 10⁶ distinct
// names were acquired and released before (issue 23), and the
// namespace's storage before and after those names. The names are used
// in setup through the backend API in bulk: one session acquires
// bulkBatch names per call and releases them in one call (10⁶ names: 500
// calls of each), renewing the session after each. Reported: each
// iteration's pair here and in a fresh namespace, alternately (ns/op is
// both), their means and ratio, and rows and bytes before the names,
// after them, and after a vacuum.
func RunNamesEverUsed(b *testing.B, bh Bench, storage Storage, counts ...int) {
	if len(counts) == 0 {
		counts = []int{1, 10_000, 1_000_000}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			prefix := FreshPrefix()
			be := bh.NewClient(b, prefix)
			ctx := context.Background()
			rows0, bytes0 := storage(b, prefix, false)
			id := Open(b, be, time.Hour)
			for start := 0; start < n; start += bulkBatch {
				names := make([]string, 0, bulkBatch)
				for i := start; i < min(n, start+bulkBatch); i++ {
					names = append(names, fmt.Sprintf("used:%d", i))
				}
				rep, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names})
				if err != nil {
					b.Fatalf("bulk acquire at %d: %v", start, err)
				}
				leases := make([]driver.Lease, len(rep.Results))
				for i, r := range rep.Results {
					if r.Token == 0 {
						b.Fatalf("bulk acquire: %s not granted", r.Name)
					}
					leases[i] = driver.Lease{Name: r.Name, Token: r.Token}
				}
				if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: leases}); err != nil {
					b.Fatalf("bulk release at %d: %v", start, err)
				}
				// The backend caps the session's lease (30s by default).
				if _, err := be.Renew(ctx, driver.RenewRequest{ID: id}); err != nil {
					b.Fatalf("bulk renew at %d: %v", start, err)
				}
			}
			if err := be.Close(ctx, id); err != nil {
				b.Fatal(err)
			}
			rows1, bytes1 := storage(b, prefix, false)
			rows2, bytes2 := storage(b, prefix, true)
			// Each iteration runs one pair here and one in a fresh
			// namespace (its own client), alternately, so that both see
			// the same load of a shared server: the ratio is the cost of
			// the names used before.
			ref := bh.NewClient(b, "")
			id = Open(b, be, time.Hour)
			refID := Open(b, ref, time.Hour)
			var used, fresh time.Duration
			pair := func(be driver.Backend, id driver.ID, name string) time.Duration {
				start := time.Now()
				rep, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{name}})
				if err != nil || rep.Results[0].Token == 0 {
					b.Fatalf("Acquire = %+v, %v", rep, err)
				}
				lease := []driver.Lease{{Name: name, Token: rep.Results[0].Token}}
				if err := be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: lease}); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				name := fmt.Sprintf("entity:%d", i)
				if i%2 == 0 {
					used += pair(be, id, name)
					fresh += pair(ref, refID, name)
				} else {
					fresh += pair(ref, refID, name)
					used += pair(be, id, name)
				}
				if i%1000 == 0 {
					for _, s := range []struct {
						be driver.Backend
						id driver.ID
					}{{be, id}, {ref, refID}} {
						if _, err := s.be.Renew(ctx, driver.RenewRequest{ID: s.id}); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(used.Nanoseconds())/float64(i), "used-ns/pair")
			b.ReportMetric(float64(fresh.Nanoseconds())/float64(i), "fresh-ns/pair")
			b.ReportMetric(float64(used)/float64(fresh), "used/fresh")
			b.ReportMetric(float64(rows0), "rows-before")
			b.ReportMetric(float64(rows1), "rows-after")
			b.ReportMetric(float64(bytes0), "bytes-before")
			b.ReportMetric(float64(bytes1), "bytes-after")
			b.ReportMetric(float64(rows2), "rows-vacuumed")
			b.ReportMetric(float64(bytes2), "bytes-vacuumed")
		})
	}
}
