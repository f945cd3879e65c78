package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
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
	probe     *serverProbe // the server's own accounting (private servers only)
	close     func()
}

// setup opens the clients of one backend on the servers of t.
type setup func(ctx context.Context, ns string, t targets) (*backend, error)

// probeIf is the probe when t's servers are this run's private ones.
func probeIf(t targets, p func() *serverProbe) *serverProbe {
	if t.private == nil {
		return nil
	}
	return p()
}

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
func need(name, v string) (string, error) {
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
