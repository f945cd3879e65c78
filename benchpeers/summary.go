package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// caseStats is everything one run measured of one case on one network.
type caseStats struct {
	inter, block       bool
	p50, p90           time.Duration
	blockMean          time.Duration
	blockLo, blockHi   time.Duration
	blockMed           time.Duration
	cpu, allocs, bytes float64 // client, per operation, over the blocks
	server             *serverResult
}

type resultKey struct{ net, backend, name string }

type results struct{ m map[resultKey]*caseStats }

func newResults() *results { return &results{m: map[resultKey]*caseStats{}} }

func (r *results) get(net, backend, name string) *caseStats {
	k := resultKey{net, backend, name}
	if r.m[k] == nil {
		r.m[k] = &caseStats{}
	}
	return r.m[k]
}

// The cases the goals name.
const (
	simbaCase   = "Simba lock.TryAcquire + Close"
	zkLockCase  = "go-zookeeper zk.Lock Lock + Unlock"
	redisLock   = "bsm/redislock Obtain + Release"
	redsyncCase = "redsync TryLock + Unlock"
)

// verdict is one row of the summary.
type verdict struct {
	backend, goal, result string
	met                   *bool // nil: not measured in this run
}

func yes() *bool { t := true; return &t }
func no() *bool  { f := false; return &f }

func mark(ok bool) *bool {
	if ok {
		return yes()
	}
	return no()
}

// summary is the one-screen table of issue 23's goals, each met or
// missed with this run's numbers.
func summary(res *results, cfg config) string {
	var v []verdict
	rtt := func(n string) bool { _, err := time.ParseDuration(n); return err == nil }
	pick := func(want string) string { // the first network of cfg matching want
		for _, n := range cfg.nets {
			if n == want || (want == "0.24ms" && rtt(n) && n == "0.24ms") {
				return n
			}
		}
		return ""
	}
	// Loopback: the shared servers, or else the private ones reached
	// directly (the same kernel path, without other processes' traffic).
	lo, r24 := pick("loopback"), pick("0.24ms")
	if lo == "" {
		lo = pick("direct")
	}
	p50r := func(net, be, name string) (float64, bool) {
		s, raw := res.get(net, be, name), res.get(net, be, "raw")
		if net == "" || !s.inter || !raw.inter || raw.p50 == 0 {
			return 0, false
		}
		return float64(s.p50) / float64(raw.p50), true
	}
	blkr := func(net, be, name string) (float64, bool) {
		s, raw := res.get(net, be, name), res.get(net, be, "raw")
		if net == "" || !s.block || !raw.block || raw.blockMean == 0 {
			return 0, false
		}
		return float64(s.blockMean) / float64(raw.blockMean), true
	}
	// Redis.
	if slices.Contains(cfg.backends, "redis") {
		if s := res.get("server", "Redis", simbaCase).server; s != nil && len(s.vals) > 0 {
			peers := ""
			for _, n := range []string{"raw", redisLock, redsyncCase} {
				if p := res.get("server", "Redis", n).server; p != nil && len(p.vals) > 0 {
					peers += fmt.Sprintf(", %s %.1f", short(n), p.vals[0])
				}
			}
			v = append(v, verdict{"Redis", "server time per pair ≤ 6 µs", fmt.Sprintf("%.1f µs, lowest block %.1f (scripts %.1f, of it inner commands %.1f; server CPU %.1f)%s", s.vals[0], s.lo[0], s.vals[1], s.vals[2], s.cpu, peers), mark(s.vals[0] <= 6)})
		} else {
			v = append(v, verdict{"Redis", "server time per pair ≤ 6 µs", "not measured (needs -methods server)", nil})
		}
		v = append(v, ratioVerdict("Redis", "loopback p50 ≤ 1.5× raw", 1.5, lo, "Redis", res, p50r, blkr, []string{redisLock, redsyncCase}, false))
		v = append(v, ratioVerdict("Redis", "0.24 ms RTT p50 ≤ 1.05× raw", 1.05, r24, "Redis", res, p50r, blkr, []string{redisLock, redsyncCase}, false))
	}
	for _, be := range []struct{ key, title string }{{"postgres", "PostgreSQL"}, {"mariadb", "MariaDB"}} {
		if !slices.Contains(cfg.backends, be.key) {
			continue
		}
		v = append(v, ratioVerdict(be.title, "loopback block mean ≤ 1.3× raw", 1.3, lo, be.title, res, blkr, p50r, nil, true))
		v = append(v, ratioVerdict(be.title, "0.24 ms RTT block mean ≤ 1.1× raw", 1.1, r24, be.title, res, blkr, p50r, nil, true))
		v = append(v, ratioVerdict(be.title, "loopback interleaved p50 ≤ 1.2× raw", 1.2, lo, be.title, res, p50r, blkr, nil, false))
		if be.key == "postgres" {
			v = append(v, verdict{be.title, "below pglock by every method", "not measured: cirello.io/pglock is not served by the module proxy this machine reaches (403)", nil})
		}
	}
	if slices.Contains(cfg.backends, "zk") {
		s, raw := res.get(lo, "ZooKeeper", simbaCase), res.get(lo, "ZooKeeper", "raw")
		if lo != "" && s.block && raw.block && raw.cpu > 0 {
			r := s.cpu / raw.cpu
			v = append(v, verdict{"ZooKeeper", "client CPU per pair ≤ 1.3× raw", fmt.Sprintf("%.2f× (%.1f µs against %.1f; zk.Lock %.1f)", r, s.cpu, raw.cpu, res.get(lo, "ZooKeeper", zkLockCase).cpu), mark(r <= 1.3)})
		} else {
			v = append(v, verdict{"ZooKeeper", "client CPU per pair ≤ 1.3× raw", "not measured (needs -methods block on loopback)", nil})
		}
		var p50s, blocks []string
		ok, any := true, false
		for _, n := range cfg.nets {
			p, q := res.get(n, "ZooKeeper", simbaCase), res.get(n, "ZooKeeper", zkLockCase)
			if p.inter && q.inter && q.p50 > 0 {
				p50s = append(p50s, fmt.Sprintf("%.2f×", float64(p.p50)/float64(q.p50)))
				ok, any = ok && p.p50 <= q.p50, true
			}
			if p.block && q.block && q.blockMean > 0 {
				blocks = append(blocks, fmt.Sprintf("%.2f×", float64(p.blockMean)/float64(q.blockMean)))
				ok, any = ok && p.blockMean <= q.blockMean, true
			}
		}
		if any {
			v = append(v, verdict{"ZooKeeper", "p50 at or below zk.Lock by every method", fmt.Sprintf("Simba / zk.Lock: p50 %s, block mean %s (%s)",
				strings.Join(p50s, ", "), strings.Join(blocks, ", "), strings.Join(cfg.nets, ", ")), mark(ok)})
		}
	}
	// Allocations.
	var parts []string
	ok, any := true, false
	for _, be := range []string{"Redis", "PostgreSQL", "MariaDB", "ZooKeeper", "etcd"} {
		if s := res.get(lo, be, simbaCase); lo != "" && s.block {
			parts = append(parts, fmt.Sprintf("%s %.0f (raw %.0f)", be, s.allocs, res.get(lo, be, "raw").allocs))
			ok, any = ok && s.allocs <= 30, true
		}
	}
	if any {
		ctxA := 0.0
		if c := res.get(lo, "Redis", ctxOnly); c.block {
			ctxA = c.allocs
		}
		v = append(v, verdict{"all", "allocations per pair ≤ 30 (caller's deadline context)", strings.Join(parts, ", ") + fmt.Sprintf(" (the context itself: %.0f)", ctxA), mark(ok)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Issue 23's goals, this run\n\nSimba through `lock.TryAcquire` + `Close` on a fresh `context.WithTimeout` per operation; ratios to the raw pair of the same run and network. Met/missed by this run's numbers (load average at the end %s); the tables below have every case.\n\n", loadavg())
	fmt.Fprintln(&b, "| backend | goal | this run | |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, x := range v {
		m := "not measured"
		if x.met != nil {
			m = "**missed**"
			if *x.met {
				m = "**met**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.backend, x.goal, x.result, m)
	}
	return b.String()
}

// ratioVerdict judges Simba's ratio by main (p50 or block mean) at net
// against limit, quoting the other method's ratio and the peers'.
func ratioVerdict(be, goal string, limit float64, net, title string, res *results, main, other func(net, be, name string) (float64, bool), peers []string, mainIsBlock bool) verdict {
	r, ok := main(net, title, simbaCase)
	if !ok {
		return verdict{be, goal, "not measured in this run", nil}
	}
	mn, on := "p50", "block mean"
	if mainIsBlock {
		mn, on = on, mn
	}
	s := fmt.Sprintf("%s %.2f×", mn, r)
	if net == "direct" {
		s = "private servers, direct: " + s
	}
	if o, ok := other(net, title, simbaCase); ok {
		s += fmt.Sprintf(" (%s %.2f×)", on, o)
	}
	for _, p := range peers {
		if pr, ok := main(net, title, p); ok {
			s += fmt.Sprintf("; %s %.2f×", short(p), pr)
		}
	}
	return verdict{be, goal, s, mark(r <= limit)}
}

func short(name string) string {
	switch name {
	case redisLock:
		return "redislock"
	case redsyncCase:
		return "redsync"
	case zkLockCase:
		return "zk.Lock"
	}
	return name
}
