package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// backend is one server kind: its cases, and how to clean up after them.
type backend struct {
	title     string
	raw       string // the raw primitive pair, in words
	pairs     []pairCase
	handovers []handoverCase
	notes     []string
	close     func()
}

// setup opens the clients of one backend.
type setup func(ctx context.Context, ns string) (*backend, error)

var setups = map[string]setup{
	"redis":    redisSetup,
	"postgres": postgresSetup,
	"mariadb":  mariadbSetup,
	"zk":       zkSetup,
	"etcd":     etcdSetup,
}

func main() {
	// Simba's sessions log through slog.Default, as a user's would: the
	// lines are still built and formatted, but not written to the
	// terminal over the tables.
	log.SetOutput(io.Discard)
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("benchpeers", flag.ContinueOnError)
	which := fs.String("backends", "redis,postgres,mariadb,zk,etcd", "backends to measure, comma-separated")
	rounds := fs.Int("rounds", 40, "shuffled rounds of acquire + release")
	batch := fs.Int("batch", 25, "acquire + release operations per case per round")
	hrounds := fs.Int("handover-rounds", 12, "shuffled rounds of handovers (one per case and lead time each)")
	only := fs.String("cases", "", "run only the cases whose name contains this (and raw)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := fs.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the shuffles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(*seed, 0))
	ns := fmt.Sprintf("bp%d", os.Getpid())
	fmt.Fprintf(w, "`benchpeers -backends %s -rounds %d -batch %d -handover-rounds %d -seed %d`, %s, GOMAXPROCS %d, %s.\n",
		*which, *rounds, *batch, *hrounds, *seed, runtime.Version(), runtime.GOMAXPROCS(0), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	for _, name := range strings.Split(*which, ",") {
		st, ok := setups[name]
		if !ok {
			return fmt.Errorf("unknown backend %q (want redis, postgres, mariadb, zk, etcd)", name)
		}
		b, err := st(ctx, ns)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		pairs := slices.DeleteFunc(b.pairs, func(c pairCase) bool { return c.name != "raw" && !strings.Contains(c.name, *only) })
		handovers := slices.DeleteFunc(b.handovers, func(c handoverCase) bool { return !strings.Contains(c.name, *only) })
		pr := runPairs(ctx, rng, pairs, *rounds, *batch)
		hr := runHandovers(ctx, rng, handovers, leads, *hrounds)
		b.close()
		report(w, b, pr, hr)
	}
	return nil
}

// leads are how long B waits before A releases: long enough that B is
// parked however it waits (watch, subscription, poll), and 5 ms, when B
// has only just asked.
var leads = []time.Duration{longLead, 5 * time.Millisecond}

const longLead = 100 * time.Millisecond

func report(w io.Writer, b *backend, pr []*pairResult, hr []*handoverResult) {
	fmt.Fprintf(w, "\n#### %s\n\nUncontended acquire + release (raw pair: %s), p50 ratio to the raw pair; process CPU and heap allocations per operation.\n\n", b.title, b.raw)
	fmt.Fprintln(w, "| case | p50 µs | p90 µs | p50 ratio | CPU µs/op | CPU ratio | allocs/op | B/op |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var rawP50, rawCPU float64
	for _, r := range pr {
		if r.failure != nil {
			fmt.Fprintf(w, "| %s | failed: %v |||||||\n", r.name, r.failure)
			continue
		}
		p50, p90 := quantile(r.lat, 0.5), quantile(r.lat, 0.9)
		cpu := float64(r.cpu) / float64(r.ops)
		if r.name == "raw" {
			rawP50, rawCPU = float64(p50), cpu
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %s | %d | %d |\n", r.name, micros(p50), micros(p90),
			ratio(float64(p50), rawP50), cpu/1e3, ratio(cpu, rawCPU), r.allocs/uint64(r.ops), r.bytes/uint64(r.ops))
	}
	if len(hr) > 0 {
		fmt.Fprintf(w, "\nHandover: A releases, B holds; from the start of A's release until B's acquire returns. B waited %v to %v, or queued %v before.\n\n", leads[0], 2*leads[0], leads[1])
		fmt.Fprintf(w, "| case | waited ≥ %v: p50 ms | p90 ms | queued %v before: p50 ms | p90 ms | samples |\n", leads[0], leads[1])
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for i := 0; i+1 < len(hr); i += 2 {
			a, q := hr[i], hr[i+1]
			if err := errors.Join(a.failure, q.failure); err != nil {
				fmt.Fprintf(w, "| %s | failed: %v |||||\n", a.name, err)
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", a.name, millis(quantile(a.lat, 0.5)), millis(quantile(a.lat, 0.9)),
				millis(quantile(q.lat, 0.5)), millis(quantile(q.lat, 0.9)), len(a.lat))
		}
	}
	for i := 0; i+1 < len(hr); i += 2 {
		sp := b.handovers[i/2].split
		if sp == nil || len(sp.toNotice[leads[0]]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, split where B's session received the release notice (`Session.WatchNotices`): B waited: release → notice p50 %s ms, notice → B holds p50 %s ms; B queued 5 ms before: %s ms and %s ms.\n",
			hr[i].name, millis(quantile(sp.toNotice[leads[0]], 0.5)), millis(quantile(sp.afterNotice[leads[0]], 0.5)),
			millis(quantile(sp.toNotice[leads[1]], 0.5)), millis(quantile(sp.afterNotice[leads[1]], 0.5)))
	}
	for _, n := range b.notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

func ratio(x, base float64) string {
	if base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x/base)
}

// simbaCases opens Simba's sessions on b for both measures, their
// closing added to cl; the handover's sessions run with cfg. The pair
// cases are Simba through its public API and, to tell the engine's share
// from the backend's, the backend's two calls alone.
func simbaCases(ctx context.Context, b session.Backend, cfg deadline.Config, cl *closers) ([]pairCase, handoverCase, error) {
	p, closeP, err := simbaPair(ctx, b, "pair")
	if err != nil {
		return nil, handoverCase{}, err
	}
	cl.add(closeP)
	d, closeD, err := driverPair(ctx, b, "driver")
	if err != nil {
		return nil, handoverCase{}, err
	}
	cl.add(closeD)
	h, closeH, err := simbaHandover(ctx, b, "handover", cfg)
	if err != nil {
		return nil, handoverCase{}, err
	}
	cl.add(closeH)
	return []pairCase{p, d}, h, nil
}

// driverPair is the backend's Acquire + Release alone, on a backend
// session of its own, with no engine: what the engine adds is the Simba
// case minus this one.
func driverPair(ctx context.Context, b session.Backend, name string) (pairCase, func(), error) {
	r, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: ttl, Owner: driver.Owner{Identity: "benchpeers"}})
	if err != nil {
		return pairCase{}, nil, err
	}
	// Renewed in the background every third of the lease, as the engine
	// would: the run outlasts one lease.
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_, _ = b.Renew(ctx, driver.RenewRequest{ID: r.ID})
			}
		}
	}()
	names := []string{name}
	op := func(ctx context.Context) error {
		rep, err := b.Acquire(ctx, driver.AcquireRequest{ID: r.ID, Names: names})
		if err != nil {
			return err
		}
		if len(rep.Results) != 1 || rep.Results[0].Token == 0 {
			return fmt.Errorf("driver acquire of %q not granted: %+v", name, rep.Results)
		}
		return b.Release(ctx, driver.ReleaseRequest{ID: r.ID, Leases: []driver.Lease{{Name: name, Token: rep.Results[0].Token}}})
	}
	closeFn := func() {
		close(stop)
		<-renewed
		_ = b.Close(context.Background(), r.ID)
	}
	return pairCase{name: "Simba backend alone (driver Acquire + Release)", op: op}, closeFn, nil
}

// simbaPair is lock.TryAcquire + Close on one long-lived session with the
// default configuration (and so the default event logging), as a user
// writes it.
func simbaPair(ctx context.Context, b session.Backend, name string) (pairCase, func(), error) {
	s, err := session.Open(ctx, b)
	if err != nil {
		return pairCase{}, nil, err
	}
	op := func(ctx context.Context) error {
		h, err := lock.TryAcquire(ctx, s, name)
		if err != nil {
			return err
		}
		return h.Close()
	}
	return pairCase{name: "Simba lock.TryAcquire + Close", op: op}, func() { _ = s.Close() }, nil
}

// simbaHandover is lock.Acquire on session B while session A holds the
// lock, A's Close starting the clock.
func simbaHandover(ctx context.Context, b session.Backend, name string, cfg deadline.Config) (handoverCase, func(), error) {
	sa, err := session.Open(ctx, b, session.WithConfig(cfg))
	if err != nil {
		return handoverCase{}, nil, err
	}
	sb, err := session.Open(ctx, b, session.WithConfig(cfg))
	if err != nil {
		_ = sa.Close()
		return handoverCase{}, nil, err
	}
	// The last notice of name B's session received, for the split.
	var noticed atomic.Int64
	stopWatch, watched := sb.WatchNotices(func(n session.Notice) {
		if n.Name == name {
			noticed.Store(time.Now().UnixNano())
		}
	})
	sp := &noticeSplit{toNotice: map[time.Duration][]time.Duration{}, afterNotice: map[time.Duration][]time.Duration{}}
	run := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		ha, err := lock.Acquire(ctx, sa, name)
		if err != nil {
			return 0, err
		}
		var start time.Time
		release := func() error {
			noticed.Store(0)
			start = time.Now()
			return ha.Close()
		}
		d, err := handover(ctx, lead, release, func(ctx context.Context) (func() error, error) {
			hb, err := lock.Acquire(ctx, sb, name)
			if err != nil {
				return nil, err
			}
			return hb.Close, nil
		})
		if at := noticed.Load(); err == nil && at != 0 {
			to := time.Unix(0, at).Sub(start)
			if to >= 0 && to <= d {
				sp.toNotice[lead] = append(sp.toNotice[lead], to)
				sp.afterNotice[lead] = append(sp.afterNotice[lead], d-to)
			}
		}
		return d, err
	}
	c := handoverCase{name: "Simba lock.Acquire", run: run}
	if watched {
		c.split = sp
	}
	return c, func() { stopWatch(); _ = sa.Close(); _ = sb.Close() }, nil
}

// handover runs one handover: the holder's release starts lead after B's
// acquire did; it returns the time from the release's start until B's
// acquire returned, and releases B's lock.
func handover(ctx context.Context, lead time.Duration, release func() error, acquireB func(context.Context) (func() error, error)) (time.Duration, error) {
	type got struct {
		at      time.Time
		release func() error
		err     error
	}
	ch := make(chan got, 1)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		rel, err := acquireB(ctx)
		ch <- got{time.Now(), rel, err}
	}()
	if lead >= longLead {
		// Spread over one more longLead, so that no peer's fixed poll
		// period lines up with the release.
		lead += rand.N(longLead)
	}
	time.Sleep(lead) // a benchmark's scenario, not a wait for a state
	start := time.Now()
	if err := release(); err != nil {
		<-ch
		return 0, fmt.Errorf("release by A: %w", err)
	}
	g := <-ch
	if g.err != nil {
		return 0, fmt.Errorf("acquire by B: %w", g.err)
	}
	return g.at.Sub(start), g.release()
}

// need returns an environment variable, or an error naming it.
func need(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s is not set: run ./scripts/services.sh start and source .services/env", name)
	}
	return v, nil
}

// closers runs cleanups in reverse order.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c closers) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}
