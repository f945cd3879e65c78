package etcdsimba_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The phase benchmarks time issue 24's handover and failover through the
// public API (lock.Acquire on session.Open), split where the time goes
// (docs/adr/0326-etcd-performance-floors.md): each process's Backend is
// wrapped by a probe that stamps the SPI calls and the release notices,
// and each client logs its gRPC calls.

// rpcLog stamps a client's unary gRPC calls while on.
type rpcLog struct {
	mu    sync.Mutex
	on    bool
	calls []rpcCall
}

type rpcCall struct {
	method     string
	start, end time.Time
	err        error
}

func (l *rpcLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	l.mu.Lock()
	if l.on {
		l.calls = append(l.calls, rpcCall{path.Base(method), start, time.Now(), err})
	}
	l.mu.Unlock()
	return err
}

// take returns the calls logged since the last take and keeps logging.
func (l *rpcLog) take() []rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls, l.on = nil, true
	return c
}

func loggedClient(b *testing.B) (*clientv3.Client, *rpcLog) {
	l := &rpcLog{}
	cli, err := clientv3.New(clientv3.Config{Endpoints: single(b), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(l.intercept)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	return cli, l
}

// probe wraps one process's Backend: it stamps Acquire, Release and Renew
// calls and the notices the engine receives, and, once crashed, answers
// every call with an error without reaching the server, as a process that
// died would send nothing more.
type probe struct {
	*etcdsimba.Backend
	crashed atomic.Bool

	mu     sync.Mutex
	events []probeEvent
}

type probeEvent struct {
	what       string // "acquire", "release", "renew", "notice"
	name       string
	start, end time.Time
	granted    bool
}

var errCrashed = errors.New("probe: the process crashed")

func (p *probe) log(e probeEvent) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

// take returns the events since the last take.
func (p *probe) take() []probeEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.events
	p.events = nil
	return e
}

func (p *probe) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if p.crashed.Load() {
		return driver.AcquireReply{}, errCrashed
	}
	start := time.Now()
	rep, err := p.Backend.Acquire(ctx, req)
	granted := err == nil && len(rep.Results) == 1 && rep.Results[0].Token != 0
	p.log(probeEvent{what: "acquire", name: req.Names[0], start: start, end: time.Now(), granted: granted})
	return rep, err
}

func (p *probe) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if p.crashed.Load() {
		return errCrashed
	}
	start := time.Now()
	err := p.Backend.Release(ctx, req)
	p.log(probeEvent{what: "release", start: start, end: time.Now()})
	return err
}

func (p *probe) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if p.crashed.Load() {
		return driver.RenewReply{}, errCrashed
	}
	start := time.Now()
	rep, err := p.Backend.Renew(ctx, req)
	if err == nil {
		p.log(probeEvent{what: "renew", start: start, end: time.Now()})
	}
	return rep, err
}

func (p *probe) Close(ctx context.Context, id driver.ID) error {
	if p.crashed.Load() {
		return errCrashed
	}
	return p.Backend.Close(ctx, id)
}

func (p *probe) Subscribe(fn func(driver.Notice)) (func(), error) {
	return p.Backend.Subscribe(func(n driver.Notice) {
		if n.Name != "" {
			p.log(probeEvent{what: "notice", name: n.Name, start: time.Now()})
		}
		fn(n)
	})
}

func engineOn(b *testing.B, be driver.Backend, lease time.Duration) *session.Session {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := session.Open(ctx, be, session.WithConfig(deadline.Config{LeaseDuration: lease}),
		session.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatalf("session.Open: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// phases collects one duration per sample under each name and reports
// their medians.
type phases map[string][]time.Duration

func (p phases) add(name string, d time.Duration) { p[name] = append(p[name], d) }

func (p phases) report(b *testing.B) {
	for name, ds := range p {
		s := slices.Clone(ds)
		slices.Sort(s)
		b.ReportMetric(float64(s[len(s)/2].Microseconds()), name+"-µs")
	}
}

func first(es []probeEvent, what string, after time.Time) (probeEvent, bool) {
	for _, e := range es {
		if e.what == what && !e.start.Before(after) {
			return e, true
		}
	}
	return probeEvent{}, false
}

func lastGrant(es []probeEvent) (probeEvent, int, bool) {
	n := 0
	var g probeEvent
	ok := false
	for _, e := range es {
		if e.what == "acquire" {
			n++
			if e.granted {
				g, ok = e, true
			}
		}
	}
	return g, n, ok
}

// rpcIn is the duration of the first logged call of method that started in
// [from, to].
func rpcIn(calls []rpcCall, method string, from, to time.Time) (time.Duration, bool) {
	for _, c := range calls {
		if c.method == method && !c.start.Before(from) && !c.start.After(to) {
			return c.end.Sub(c.start), true
		}
	}
	return 0, false
}

// BenchmarkHandoverPhases is issue 24's handover through the public API:
// A's lock.Close to B's lock.Acquire returning, B queued lead before the
// release, A and B separate processes (their own client, Backend and
// session), beside etcd's raw floor (A's delete, B's watch event, B's
// put) in the same iterations. The split, medians from A's Close: A's
// engine calls Release (release-sent), its transaction (release-txn),
// the Release returns (release), B's Backend gets the delete's notice
// (notice), B's engine starts the Acquire that wins (wake: from the
// notice, or from the end of an attempt that was in flight), its
// transaction and its restore check's Status (txn, status), the Acquire
// returns (acquire), lock.Acquire returns (total); attempts is B's
// Acquire calls per handover.
func BenchmarkHandoverPhases(b *testing.B) {
	for _, lead := range []time.Duration{5 * time.Millisecond, 150 * time.Millisecond} {
		for _, guard := range []bool{true, false} {
			name := fmt.Sprintf("lead=%v/default", lead)
			var opts []etcdsimba.Option
			if !guard {
				name = fmt.Sprintf("lead=%v/WithoutRevokeGuard", lead)
				opts = append(opts, etcdsimba.WithoutRevokeGuard())
			}
			b.Run(name, func(b *testing.B) { handoverPhases(b, lead, opts...) })
		}
	}
}

func handoverPhases(b *testing.B, lead time.Duration, opts ...etcdsimba.Option) {
	ns := newNamespace(b)
	cliA, logA := loggedClient(b)
	cliB, logB := loggedClient(b)
	pa := &probe{Backend: newBackend(b, cliA, ns, opts...)}
	pb := &probe{Backend: newBackendNoInit(b, cliB, ns, opts...)}
	sa, sb := engineOn(b, pa, 15*time.Second), engineOn(b, pb, 15*time.Second)
	ctx := context.Background()

	// The raw floor, on the same clients.
	key := ns + "/raw"
	grant := func(cli *clientv3.Client) clientv3.LeaseID {
		gr, err := cli.Grant(ctx, 600)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = cli.Revoke(context.Background(), gr.ID) })
		return gr.ID
	}
	la, lb := grant(cliA), grant(cliB)
	wch := cliB.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithCreatedNotify())
	<-wch
	put := func(cli *clientv3.Client, l clientv3.LeaseID) bool {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "v", clientv3.WithLease(l))).Commit()
		if err != nil {
			b.Fatal(err)
		}
		return r.Succeeded
	}
	deleted := func() {
		for {
			select {
			case r := <-wch:
				for _, ev := range r.Events {
					if ev.Type == clientv3.EventTypeDelete {
						return
					}
				}
			case <-time.After(5 * time.Second):
				b.Fatal("no delete event within 5s")
			}
		}
	}
	ph := phases{}
	raw := func() {
		if !put(cliA, la) {
			b.Fatal("raw key taken")
		}
		time.Sleep(lead) // B "queued" lead before the release
		t0 := time.Now()
		if _, err := cliA.Delete(ctx, key); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		deleted()
		t2 := time.Now()
		if !put(cliB, lb) {
			b.Fatal("B's raw put failed")
		}
		t3 := time.Now()
		ph.add("raw-delete", t1.Sub(t0))
		ph.add("raw-event", t2.Sub(t0))
		ph.add("raw-put", t3.Sub(t2))
		ph.add("raw-total", t3.Sub(t0))
		if _, err := cliB.Delete(ctx, key); err != nil {
			b.Fatal(err)
		}
		deleted()
	}
	simba := func() {
		ha, err := lock.Acquire(ctx, sa, "x")
		if err != nil {
			b.Fatal(err)
		}
		type got struct {
			h  *lock.Held
			at time.Time
		}
		ch := make(chan got, 1)
		go func() {
			h, err := lock.Acquire(ctx, sb, "x")
			if err != nil {
				b.Error(err)
			}
			ch <- got{h, time.Now()}
		}()
		time.Sleep(lead) // a benchmark's scenario, not a wait for a state
		pa.take()
		pb.take()
		logA.take()
		logB.take()
		t0 := time.Now()
		if err := ha.Close(); err != nil {
			b.Fatal(err)
		}
		g := <-ch
		if g.h == nil {
			b.FailNow()
		}
		ea, eb, callsA, calls := pa.take(), pb.take(), logA.take(), logB.take()
		ph.add("total", g.at.Sub(t0))
		if rel, ok := first(ea, "release", t0); ok {
			ph.add("release-sent", rel.start.Sub(t0))
			ph.add("release", rel.end.Sub(t0))
			if d, ok := rpcIn(callsA, "Txn", rel.start, rel.end); ok {
				ph.add("release-txn", d)
			}
		}
		n, okN := first(eb, "notice", t0)
		if okN {
			ph.add("notice", n.start.Sub(t0))
		}
		if w, attempts, ok := lastGrant(eb); ok {
			ph.add("attempts", time.Duration(attempts)*time.Microsecond)
			from := t0
			if okN {
				from = n.start
			}
			for _, e := range eb {
				if e.what == "acquire" && !e.granted && e.end.After(from) && e.end.Before(w.start) {
					from = e.end // the winning attempt waited for one in flight
				}
			}
			ph.add("wake", w.start.Sub(from))
			ph.add("acquire", w.end.Sub(w.start))
			ph.add("acquire-return-to-holder", g.at.Sub(w.end))
			if d, ok := rpcIn(calls, "Txn", w.start, w.end); ok {
				ph.add("txn", d)
			}
			if d, ok := rpcIn(calls, "Status", w.start, w.end); ok {
				ph.add("status", d)
			}
		}
		if err := g.h.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			simba()
			raw()
		} else {
			raw()
			simba()
		}
	}
	b.StopTimer()
	ph.report(b)
}

// reportSpread adds the lowest and highest sample of name.
func (p phases) reportSpread(b *testing.B, name string) {
	if len(p[name]) == 0 {
		return
	}
	b.ReportMetric(float64(slices.Min(p[name]).Microseconds()), name+"-min-µs")
	b.ReportMetric(float64(slices.Max(p[name]).Microseconds()), name+"-max-µs")
}

// BenchmarkFailoverPhases is issue 24's failover after a crash through the
// public API: A holds x through lock.Acquire, B waits in lock.Acquire, and
// A's process "dies" right after a renewal (its probe answers every later
// call with an error, sending nothing). Figures are multiples of the lease
// (×1000) and phases in µs, medians: from the end of A's last renewal to
// B holding (total); to B's Backend getting the delete's notice, less the
// lease (expiry: etcd's lessor finds expired leases every 500 ms, then
// commits the revocation; the server's expiry is between the renewal's
// start and end plus the TTL, renewal is that spread); the last notice to
// lock.Acquire returning (takeover; under the revoke guard the first
// notice starts the guard's delay and the last one ends it).
func BenchmarkFailoverPhases(b *testing.B) {
	for _, lease := range []time.Duration{3 * time.Second, 10 * time.Second} {
		for _, guard := range []bool{false, true} {
			name := fmt.Sprintf("lease=%v/WithoutRevokeGuard", lease)
			opts := []etcdsimba.Option{etcdsimba.WithoutRevokeGuard()}
			if guard {
				name, opts = fmt.Sprintf("lease=%v/default", lease), nil
			}
			b.Run(name, func(b *testing.B) { failoverPhases(b, lease, opts...) })
		}
	}
}

// expiryTick is how often etcd's lessor looks for expired leases (a
// constant of the server, lessor.go's runLoop).
const expiryTick = 500 * time.Millisecond

func failoverPhases(b *testing.B, lease time.Duration, opts ...etcdsimba.Option) {
	ns := newNamespace(b)
	cliB := newClient(b, single(b))
	pb := &probe{Backend: newBackend(b, cliB, ns, opts...)}
	sb := engineOn(b, pb, lease)
	ph := phases{}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Each iteration starts just after the lessor's tick that ended the
		// last one: without a random pause the crash would fall at the
		// same point of the server's 500 ms expiry period every time.
		time.Sleep(rand.N(expiryTick)) // a benchmark's scenario, not a wait for a state
		// A new holder process each time: its client, Backend and session.
		cliA := newClient(b, single(b))
		pa := &probe{Backend: newBackendNoInit(b, cliA, ns, opts...)}
		sa := engineOn(b, pa, lease)
		if _, err := lock.Acquire(ctx, sa, "x"); err != nil {
			b.Fatal(err)
		}
		type got struct {
			h  *lock.Held
			at time.Time
		}
		ch := make(chan got, 1)
		go func() {
			h, err := lock.Acquire(ctx, sb, "x")
			if err != nil {
				b.Error(err)
			}
			ch <- got{h, time.Now()}
		}()
		// Crash right after A's next renewal.
		pa.take()
		var last probeEvent
		for deadline := time.Now().Add(2 * lease); ; {
			if e, ok := first(pa.take(), "renew", time.Time{}); ok {
				pa.crashed.Store(true)
				last = e
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("A did not renew within two leases")
			}
			time.Sleep(time.Millisecond) // polling the probe's log
		}
		pb.take()
		b.StartTimer()
		g := <-ch
		b.StopTimer()
		if g.h == nil {
			b.FailNow()
		}
		ph.add("total×1000", time.Duration(float64(g.at.Sub(last.end))/float64(lease)*1000)*time.Microsecond)
		eb := pb.take()
		if n, ok := first(eb, "notice", last.end); ok {
			ph.add("expiry", n.start.Sub(last.end)-lease)
		}
		// The notice that woke the winning attempt (under the revoke guard,
		// the end of the delay the first one started).
		var woke probeEvent
		for _, e := range eb {
			if e.what == "notice" && e.start.Before(g.at) {
				woke = e
			}
		}
		if !woke.start.IsZero() {
			ph.add("takeover", g.at.Sub(woke.start))
		}
		ph.add("renewal", last.end.Sub(last.start))
		if err := g.h.Close(); err != nil {
			b.Fatal(err)
		}
	}
	ph.report(b)
	ph.reportSpread(b, "expiry")
	ph.reportSpread(b, "total×1000")
}
