// Command hops times each step of one Simba handover on PostgreSQL or
// ZooKeeper: A's lock Close, the backend calls (through a wrapping
// driver.Backend), pgx's pool and query events, the release notice's
// delivery to the subscription and to B's session, and B's lock.Acquire
// returning. Each event is printed as its p50 time since A's Close began,
// separately for B waited 100–200 ms and B queued 5 ms before the release
// (the two cases of benchpeers' handover table), so the step that grows
// when B waited long shows.
//
//	. .services/env; cd benchpeers && go run ./hops -backend pg -n 30
//
// Not a benchmark of its own: one process, one pair of sessions, no
// interleaving with other cases. Event names: X.Acquire / X.Release (the
// driver call of session X, .ret when it returned), q.start / q.end (pgx
// query), pool.acq / pool.got (pgxpool), sub.fn (the backend's
// subscription function, once per subscribed session), B.notice (B's
// Session.WatchNotices), A.Close.ret, B.holds. "#2" marks a second
// occurrence in the same handover.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/pgsimba"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// timeline records the events of the handover in progress.
type timeline struct {
	mu    sync.Mutex
	on    bool
	start time.Time
	ev    []string
	at    []time.Duration
}

var tl timeline

func mark(label string) {
	now := time.Now()
	tl.mu.Lock()
	if tl.on {
		tl.ev = append(tl.ev, label)
		tl.at = append(tl.at, now.Sub(tl.start))
	}
	tl.mu.Unlock()
}

// tracer marks pgx's query and pool events.
type tracer struct{}

func (tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	what := "q.start"
	switch {
	case strings.Contains(d.SQL, "_acquire_"):
		what += " acquire"
	case strings.Contains(d.SQL, "_release_"):
		what += " release"
	}
	mark(what)
	return ctx
}

func (tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) { mark("q.end") }

func (tracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	mark("pool.acq")
	return ctx
}

func (tracer) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
	mark("pool.got")
}

// marked wraps a backend, marking its calls with the session's identity.
type marked struct {
	driver.Backend
	bc driver.Broadcaster
	mu sync.Mutex
	by map[driver.ID]string
}

func (m *marked) Subscribe(fn func(driver.Notice)) (func(), error) {
	return m.bc.Subscribe(func(n driver.Notice) { mark("sub.fn"); fn(n) })
}

func (m *marked) Open(ctx context.Context, r driver.OpenRequest) (driver.OpenReply, error) {
	rep, err := m.Backend.Open(ctx, r)
	m.mu.Lock()
	m.by[rep.ID] = r.Owner.Identity
	m.mu.Unlock()
	return rep, err
}

func (m *marked) who(id driver.ID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.by[id]
}

func (m *marked) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.AcquireReply, error) {
	w := m.who(r.ID)
	mark(w + ".Acquire")
	defer mark(w + ".Acquire.ret")
	return m.Backend.Acquire(ctx, r)
}

func (m *marked) Release(ctx context.Context, r driver.ReleaseRequest) error {
	w := m.who(r.ID)
	mark(w + ".Release")
	defer mark(w + ".Release.ret")
	return m.Backend.Release(ctx, r)
}

func main() {
	which := flag.String("backend", "pg", "pg or zk")
	n := flag.Int("n", 30, "handovers per lead time")
	verbose := flag.Bool("v", false, "print every handover's timeline")
	flag.Parse()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	ns := fmt.Sprintf("hops%d", os.Getpid())
	var b driver.Backend
	var cleanup func()
	switch *which {
	case "pg":
		cfg, err := pgxpool.ParseConfig(os.Getenv("SIMBA_POSTGRES_URL"))
		if err != nil {
			log.Fatal(err)
		}
		cfg.ConnConfig.Tracer = tracer{}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		pb, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(ns))
		if err != nil {
			log.Fatal(err)
		}
		b, cleanup = pb, func() { _ = pb.Shutdown(ctx); pool.Close() }
	case "zk":
		zb, err := zksimba.New(strings.Split(os.Getenv("SIMBA_ZK_SERVERS"), ","), "/simba-hops/"+ns, zksimba.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			log.Fatal(err)
		}
		if err := zb.ForceInit(ctx); err != nil { // a fresh namespace (ADR 0179)
			log.Fatal(err)
		}
		b, cleanup = zb, func() { _ = zb.Shutdown(ctx) }
	default:
		log.Fatalf("unknown backend %q (pg or zk)", *which)
	}
	m := &marked{Backend: b, bc: b.(driver.Broadcaster), by: map[driver.ID]string{}}
	sa, err := session.Open(ctx, m, session.WithIdentity("A", nil))
	if err != nil {
		log.Fatal(err)
	}
	sb, err := session.Open(ctx, m, session.WithIdentity("B", nil))
	if err != nil {
		log.Fatal(err)
	}
	stopWatch, _ := sb.WatchNotices(func(session.Notice) { mark("B.notice") })
	leads := []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}
	type key struct {
		lead  time.Duration
		event string
	}
	at := map[key][]time.Duration{}
	var order []string
	for range *n {
		for _, lead := range leads {
			ha, err := lock.Acquire(ctx, sa, "x")
			if err != nil {
				log.Fatal(err)
			}
			type got struct {
				h  *lock.Held
				at time.Time
			}
			ch := make(chan got, 1)
			go func() {
				h, err := lock.Acquire(ctx, sb, "x")
				if err != nil {
					log.Fatal(err)
				}
				ch <- got{h, time.Now()}
			}()
			d := lead
			if lead >= 100*time.Millisecond {
				d += rand.N(100 * time.Millisecond)
			}
			time.Sleep(d) // the scenario, as benchpeers'
			tl.mu.Lock()
			tl.on, tl.start, tl.ev, tl.at = true, time.Now(), nil, nil
			tl.mu.Unlock()
			if err := ha.Close(); err != nil {
				log.Fatal(err)
			}
			mark("A.Close.ret")
			g := <-ch
			tl.mu.Lock()
			tl.on = false
			ev, ts := append(tl.ev, "B.holds"), append(tl.at, g.at.Sub(tl.start))
			tl.mu.Unlock()
			if *verbose {
				var line strings.Builder
				fmt.Fprintf(&line, "lead %-6v", lead)
				for i := range ev {
					fmt.Fprintf(&line, " %s@%.0f", ev[i], float64(ts[i])/1e3)
				}
				fmt.Println(line.String())
			}
			seen := map[string]int{}
			for i, e := range ev {
				seen[e]++
				if seen[e] > 1 {
					e = fmt.Sprintf("%s#%d", e, seen[e])
				}
				at[key{lead, e}] = append(at[key{lead, e}], ts[i])
				if !slices.Contains(order, e) {
					order = append(order, e)
				}
			}
			_ = g.h.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}
	stopWatch()
	_ = sa.Close()
	_ = sb.Close()
	cleanup()
	// In order of the waited case's p50 (the queued one's for an event
	// only it saw).
	p50 := func(d []time.Duration) time.Duration {
		if len(d) == 0 {
			return -1
		}
		slices.Sort(d)
		return d[(len(d)-1)/2]
	}
	sortAt := func(e string) time.Duration {
		if d := at[key{leads[0], e}]; len(d) > 0 {
			return p50(d)
		}
		return p50(at[key{leads[1], e}])
	}
	slices.SortStableFunc(order, func(x, y string) int { return int(sortAt(x) - sortAt(y)) })
	fmt.Printf("%s, %d handovers per lead: p50 µs since A's Close began (samples)\n\n", *which, *n)
	fmt.Printf("| event | B waited %v–%v | B queued %v before |\n|---|---|---|\n", leads[0], 2*leads[0], leads[1])
	for _, e := range order {
		fmt.Printf("| %s |", e)
		for _, l := range leads {
			d := at[key{l, e}]
			if len(d) == 0 {
				fmt.Print(" – |")
				continue
			}
			fmt.Printf(" %.0f (%d) |", float64(p50(d))/1e3, len(d))
		}
		fmt.Println()
	}
}
