package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is what one run measures.
type config struct {
	backends    []string
	nets        []string // "loopback", "direct", or a round trip such as "0.24ms"
	methods     map[string]bool
	rounds      int
	batch       int
	block       int
	reps        int
	serverRedis int
	serverOther int
	hrounds     int
	only        string
}

const allMethods = "interleaved,block,server,handover"

// complete is whether the run measured every goal of the summary.
func (c config) complete() bool {
	for _, b := range []string{"redis", "postgres", "mariadb", "zk", "etcd"} {
		if !slices.Contains(c.backends, b) {
			return false
		}
	}
	return (slices.Contains(c.nets, "loopback") || slices.Contains(c.nets, "direct")) && slices.Contains(c.nets, "0.24ms") &&
		c.methods["interleaved"] && c.methods["block"] && c.methods["server"] && c.only == ""
}

func run(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("benchpeers", flag.ContinueOnError)
	which := fs.String("backends", "redis,postgres,mariadb,zk,etcd", "backends to measure, comma-separated")
	nets := fs.String("nets", "loopback,0.24ms,1ms", "networks, comma-separated: loopback (the shared servers of .services/env), direct (this run's private servers in the network namespace, no delay), or a round trip (e.g. 0.24ms: the private servers behind the delay proxy)")
	methods := fs.String("methods", "interleaved,block,server", "methods, comma-separated, from "+allMethods+" (or all); server runs on the private servers, direct; handover on loopback only")
	rounds := fs.Int("rounds", 300, "interleaved: shuffled rounds")
	batch := fs.Int("batch", 1, "interleaved: operations per case per round")
	block := fs.Int("block", 200, "block: operations per block (one case alone)")
	reps := fs.Int("reps", 5, "block: blocks per case, in shuffled order")
	serverRedis := fs.Int("server-pairs", 20000, "server: operations per case on Redis")
	serverOther := fs.Int("server-pairs-other", 2000, "server: operations per case on the other backends")
	hrounds := fs.Int("handover-rounds", 12, "handover: shuffled rounds (one per case and lead time each)")
	only := fs.String("cases", "", "run only the cases whose name contains this (and raw)")
	out := fs.String("o", "", "also write the report (with the summary first) to this file")
	sumFile := fs.String("summary", "", "replace the goals table between the bench-peers markers of this file (docs/bench/_summary.md) with this run's")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the shuffles")
	proxy := fs.String("proxy", "", "internal: run the delay proxy for these listen=target routes")
	proxyDelay := fs.Duration("proxy-delay", 0, "internal: the proxy's one-way delay")
	echo := fs.String("echo", "", "internal: run the echo server on this address")
	probeRTT := fs.String("rtt-probe", "", "internal: print the round trip to the echo server at this address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *proxy != "" {
		return serveProxy(*proxy, *proxyDelay)
	}
	if *echo != "" {
		return serveEcho(*echo)
	}
	if *probeRTT != "" {
		p50, p90, err := echoRTT(*probeRTT, 1000)
		fmt.Fprintf(w, "p50 %s µs, p90 %s µs\n", micros(p50), micros(p90))
		return err
	}
	cfg := config{backends: strings.Split(*which, ","), nets: strings.Split(*nets, ","), methods: map[string]bool{},
		rounds: *rounds, batch: *batch, block: *block, reps: *reps, serverRedis: *serverRedis, serverOther: *serverOther,
		hrounds: *hrounds, only: *only}
	if *methods == "all" {
		*methods = allMethods
	}
	for _, m := range strings.Split(*methods, ",") {
		if !slices.Contains(strings.Split(allMethods, ","), m) {
			return fmt.Errorf("unknown method %q (want %s)", m, allMethods)
		}
		cfg.methods[m] = true
	}
	for _, b := range cfg.backends {
		if _, ok := setups[b]; !ok {
			return fmt.Errorf("unknown backend %q (want redis, postgres, mariadb, zk, etcd)", b)
		}
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rng := rand.New(rand.NewPCG(*seed, 0))
	var body strings.Builder
	bw := io.MultiWriter(w, &body)
	header := fmt.Sprintf("`benchpeers %s -seed %d`, %s, %s, GOMAXPROCS %d, %s, load average %s.\n",
		strings.Join(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "-seed") }), " "),
		*seed, checkout(), runtime.Version(), runtime.GOMAXPROCS(0), time.Now().UTC().Format("2006-01-02 15:04 MST"), loadavg())
	fmt.Fprint(bw, header)
	res := newResults()
	err := measureAll(ctx, bw, rng, cfg, res)
	sum := summary(res, cfg)
	fmt.Fprintf(w, "\n%s", sum)
	if *out != "" {
		doc := "# Peer benchmark: the last run of make bench-peers\n\n" + header + "\n" + sum + body.String()[len(header):]
		if werr := os.WriteFile(*out, []byte(doc), 0o644); werr != nil {
			return errors.Join(err, werr)
		}
	}
	if *sumFile != "" && !cfg.complete() {
		fmt.Fprintf(os.Stderr, "benchpeers: %s left as it was: a partial run (every backend, loopback and 0.24ms, interleaved, block and server are needed)\n", *sumFile)
	} else if *sumFile != "" {
		if werr := replaceMarked(*sumFile, header+"\n"+sum); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

const (
	markBegin = "<!-- bench-peers goals: written by benchpeers -summary -->"
	markEnd   = "<!-- end of bench-peers goals -->"
)

// replaceMarked puts text between the markers of file, which must have
// both: the rest of the file is someone's prose.
func replaceMarked(file, text string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, markBegin), strings.Index(s, markEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: want the lines %q and %q around the goals table", file, markBegin, markEnd)
	}
	// The table's own heading is the file's: drop the generated one.
	text = strings.Replace(text, "### Issue 23's goals, this run\n\n", "", 1)
	s = s[:i+len(markBegin)] + "\n\n" + text + "\n" + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}

// checkout names the code measured: the commit, and whether the work
// tree had changes.
func checkout() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "commit unknown"
	}
	s := "at " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		s += " with uncommitted changes"
	}
	return s
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func measureAll(ctx context.Context, w io.Writer, rng *rand.Rand, cfg config, res *results) error {
	needPrivate := cfg.methods["server"]
	for _, n := range cfg.nets {
		if n != "loopback" {
			needPrivate = true
		}
	}
	var priv *privateServers
	if needPrivate {
		fmt.Fprintf(w, "\nPrivate servers (%s) in network namespace %s (%s), reached over a veth pair from %s; nothing else is routed.\n",
			strings.Join(cfg.backends, ", "), netnsName, nsAddr, hostAddr)
		var err error
		priv, err = startPrivate(ctx, cfg.backends)
		if err != nil {
			// The loopback measures can still be taken.
			fmt.Fprintf(w, "\n**No private servers**: %v; only the loopback measures are taken.\n", err)
			priv = nil
		} else {
			defer priv.stop()
			for _, k := range cfg.backends {
				if e := priv.failed[k]; e != nil {
					fmt.Fprintf(w, "\n**Private %s could not be started**: %v\n", k, e)
				}
			}
		}
	}
	ns0 := fmt.Sprintf("bp%d", os.Getpid())
	for ni, n := range cfg.nets {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var t targets
		var proxy *proxyProc
		if n != "loopback" && priv == nil {
			continue
		}
		switch n {
		case "loopback":
			t = sharedTargets()
		case "direct":
			t = privateTargets(priv, "direct (private servers, no delay)", false)
		default:
			rtt, err := time.ParseDuration(n)
			if err != nil {
				return fmt.Errorf("-nets %q: want loopback, direct or a duration", n)
			}
			p, cal, err := calibratedProxy(ctx, rtt)
			if err != nil {
				return err
			}
			proxy = p
			t = privateTargets(priv, n+" RTT", true)
			fmt.Fprintf(w, "\n### %s round trip (private servers behind the delay proxy)\n\n%s.\n", n, cal)
		}
		if n == "loopback" {
			fmt.Fprintf(w, "\n### Loopback (the shared servers)\n")
		} else if n == "direct" {
			fmt.Fprintf(w, "\n### Private servers, direct (veth pair, no delay)\n")
		}
		for _, bname := range cfg.backends {
			if t.private != nil && t.private.failed[bname] != nil {
				continue
			}
			if err := measureBackend(ctx, w, rng, cfg, res, n, bname, fmt.Sprintf("%s_%d", ns0, ni), t, false); err != nil {
				fmt.Fprintf(w, "\n#### %s\n\n**failed**: %v\n", bname, err)
			}
		}
		if proxy != nil {
			proxy.stop()
		}
	}
	if cfg.methods["server"] && priv != nil {
		fmt.Fprintf(w, "\n### Server cost per acquire + release (private servers, direct, each case alone)\n")
		t := privateTargets(priv, "server", false)
		for _, bname := range cfg.backends {
			if priv.failed[bname] != nil {
				continue
			}
			if err := measureBackend(ctx, w, rng, cfg, res, "server", bname, ns0+"_s", t, true); err != nil {
				fmt.Fprintf(w, "\n#### %s\n\n**failed**: %v\n", bname, err)
			}
		}
	}
	return nil
}

// measureBackend runs the methods of cfg on one backend and network.
func measureBackend(ctx context.Context, w io.Writer, rng *rand.Rand, cfg config, res *results, net, bname, ns string, t targets, serverOnly bool) error {
	b, err := setups[bname](ctx, ns, t)
	if err != nil {
		return err
	}
	defer b.close()
	pairs := slices.DeleteFunc(slices.Clone(b.pairs), func(c pairCase) bool {
		return c.name != "raw" && !strings.Contains(c.name, cfg.only)
	})
	// The caller's context alone: what every case's figures include.
	pairs = append(pairs, pairCase{name: ctxOnly, op: func(context.Context) error { return nil }})
	fmt.Fprintf(w, "\n#### %s (%s)\n", b.title, t.label)
	if serverOnly {
		n := cfg.serverOther
		if bname == "redis" {
			n = cfg.serverRedis
		}
		sr := runServer(ctx, pairs[:len(pairs)-1], b.probe, t.private.pid(bname), n)
		reportServer(w, b, sr, n)
		for _, r := range sr {
			if r.failure == nil {
				res.get(net, b.title, r.name).server = r
			}
		}
		return nil
	}
	var pr []*pairResult
	var br []*blockResult
	if cfg.methods["interleaved"] {
		pr = runPairs(ctx, rng, pairs, cfg.rounds, cfg.batch)
	}
	if cfg.methods["block"] {
		br = runBlocks(ctx, rng, pairs, cfg.reps, cfg.block)
	}
	if pr != nil || br != nil {
		reportPairs(w, b, cfg, pr, br, res, net)
	}
	if cfg.methods["handover"] && net == "loopback" {
		handovers := slices.DeleteFunc(slices.Clone(b.handovers), func(c handoverCase) bool { return !strings.Contains(c.name, cfg.only) })
		hr := runHandovers(ctx, rng, handovers, leads, cfg.hrounds)
		reportHandovers(w, b, hr)
	}
	for _, n := range b.notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	return nil
}

const ctxOnly = "(context.WithTimeout + cancel alone)"

// leads are how long B waits before A releases: long enough that B is
// parked however it waits (watch, subscription, poll), and 5 ms, when B
// has only just asked.
var leads = []time.Duration{longLead, 5 * time.Millisecond}

const longLead = 100 * time.Millisecond

func reportPairs(w io.Writer, b *backend, cfg config, pr []*pairResult, br []*blockResult, res *results, net string) {
	fmt.Fprintf(w, "\nUncontended acquire + release (raw pair: %s), a fresh `context.WithTimeout` (%v) per operation. "+
		"Interleaved: %d shuffled rounds of %d operation(s) per case, p50/p90 and the p50's ratio to the raw pair's. "+
		"Block: each case alone for %d operations, %d blocks per case in shuffled order; mean time per operation over all blocks (the median block's mean; the lowest–highest) and its ratio; "+
		"the client's CPU (user + system, every goroutine of the process) and heap allocations per operation over the blocks.\n\n",
		b.raw, opTimeout, cfg.rounds, cfg.batch, cfg.block, cfg.reps)
	fmt.Fprintln(w, "| case | p50 µs | p90 µs | p50 ratio | block mean µs (median block; range) | block ratio | client CPU µs | CPU ratio | allocs | B |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	names := map[string]bool{}
	var order []string
	for _, r := range pr {
		if !names[r.name] {
			names[r.name] = true
			order = append(order, r.name)
		}
	}
	for _, r := range br {
		if !names[r.name] {
			names[r.name] = true
			order = append(order, r.name)
		}
	}
	find := func(name string) (*pairResult, *blockResult) {
		var p *pairResult
		var q *blockResult
		for _, r := range pr {
			if r.name == name {
				p = r
			}
		}
		for _, r := range br {
			if r.name == name {
				q = r
			}
		}
		return p, q
	}
	for _, name := range order {
		p, q := find(name)
		st := res.get(net, b.title, name)
		if p != nil && p.failure == nil && len(p.lat) > 0 {
			st.p50, st.p90, st.inter = quantile(p.lat, 0.5), quantile(p.lat, 0.9), true
		}
		if q != nil && q.failure == nil && q.ops > 0 {
			st.blockMean, st.block = q.mean(), true
			st.blockLo, st.blockHi = slices.Min(q.means), slices.Max(q.means)
			st.blockMed = quantile(slices.Clone(q.means), 0.5)
			st.cpu = float64(q.cpu) / float64(q.ops) / 1e3
			st.allocs = float64(q.allocs) / float64(q.ops)
			st.bytes = float64(q.bytes) / float64(q.ops)
		}
	}
	raw := res.get(net, b.title, "raw")
	for _, name := range order {
		p, q := find(name)
		var fails []string
		if p != nil && p.failure != nil {
			fails = append(fails, "interleaved: "+p.failure.Error())
		}
		if q != nil && q.failure != nil {
			fails = append(fails, "block: "+q.failure.Error())
		}
		st := res.get(net, b.title, name)
		cell := func(ok bool, f func() string) string {
			if !ok {
				return "–"
			}
			return f()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			cell(st.inter, func() string { return micros(st.p50) }),
			cell(st.inter, func() string { return micros(st.p90) }),
			cell(st.inter && name != ctxOnly, func() string { return ratio(float64(st.p50), float64(raw.p50)) }),
			cell(st.block, func() string {
				return fmt.Sprintf("%s (%s; %s–%s)", micros(st.blockMean), micros(st.blockMed), micros(st.blockLo), micros(st.blockHi))
			}),
			cell(st.block && name != ctxOnly, func() string { return ratio(float64(st.blockMean), float64(raw.blockMean)) }),
			cell(st.block, func() string { return fmt.Sprintf("%.1f", st.cpu) }),
			cell(st.block && name != ctxOnly, func() string { return ratio(st.cpu, raw.cpu) }),
			cell(st.block, func() string { return fmt.Sprintf("%.1f", st.allocs) }),
			cell(st.block, func() string { return fmt.Sprintf("%.0f", st.bytes) }))
		if len(fails) > 0 {
			fmt.Fprintf(w, "| %s | **failed**: %s |||||||||\n", name, strings.Join(fails, "; "))
		}
	}
}

func reportServer(w io.Writer, b *backend, sr []*serverResult, n int) {
	fmt.Fprintf(w, "\nEach case alone for %d operations (after 20 to warm up) on the private server, direct, in %d blocks; per acquire + release: the mean over every block, and in brackets the lowest block's (what the machine's other load added shows as the difference).\n\n", n, serverBlocks)
	cols := []string{"server CPU µs (the server's processes, /proc)"}
	if b.probe != nil {
		cols = append(cols, b.probe.cols...)
	}
	fmt.Fprintf(w, "| case | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, r := range sr {
		if r.failure != nil {
			fmt.Fprintf(w, "| %s | **failed**: %v |%s\n", r.name, r.failure, strings.Repeat("|", len(cols)-1))
			continue
		}
		cells := []string{"–"}
		if r.cpu >= 0 {
			cells[0] = fmt.Sprintf("%.1f (%.1f)", r.cpu, r.cpuLo)
		}
		for i, v := range r.vals {
			cells = append(cells, fmt.Sprintf("%.2f (%.2f)", v, r.lo[i]))
		}
		fmt.Fprintf(w, "| %s | %s |\n", r.name, strings.Join(cells, " | "))
	}
	if b.probe != nil {
		fmt.Fprintf(w, "\n%s Background work (the sessions' renewals every 5 s, of every case's session) is in every case's figures alike: a few operations per 5 s.\n", b.probe.note)
	} else {
		fmt.Fprintf(w, "\nNo per-statement accounting is read on %s: the server CPU is the server process's own (JVM threads included for ZooKeeper).\n", b.title)
	}
}

func reportHandovers(w io.Writer, b *backend, hr []*handoverResult) {
	if len(hr) == 0 {
		return
	}
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
	for i := 0; i+1 < len(hr); i += 2 {
		var sp *noticeSplit
		for _, h := range b.handovers {
			if h.name == hr[i].name {
				sp = h.split
			}
		}
		if sp == nil || len(sp.toNotice[leads[0]]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, split where B's session received the release notice (`Session.WatchNotices`): B waited: release → notice p50 %s ms, notice → B holds p50 %s ms; B queued 5 ms before: %s ms and %s ms.\n",
			hr[i].name, millis(quantile(sp.toNotice[leads[0]], 0.5)), millis(quantile(sp.afterNotice[leads[0]], 0.5)),
			millis(quantile(sp.toNotice[leads[1]], 0.5)), millis(quantile(sp.afterNotice[leads[1]], 0.5)))
	}
}
