package redissimba_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

func open(t *testing.T, b *redissimba.Backend, lease time.Duration) driver.ID {
	t.Helper()
	r, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r.ID
}

func acquire(t *testing.T, b *redissimba.Backend, id driver.ID, names ...string) []uint64 {
	t.Helper()
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: names})
	if err != nil {
		t.Fatalf("Acquire(%d names from %q): %v", len(names), names[0], err)
	}
	if len(r.Results) != len(names) {
		t.Fatalf("Acquire(%v): %d results", names, len(r.Results))
	}
	toks := make([]uint64, len(names))
	for i, res := range r.Results {
		if res.Err != nil || res.Name != names[i] {
			t.Fatalf("Acquire result %d = %+v", i, res)
		}
		toks[i] = res.Token
	}
	return toks
}

func release(t *testing.T, b *redissimba.Backend, id driver.ID, name string, tok uint64) {
	t.Helper()
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: tok}}}); err != nil {
		t.Fatalf("Release(%s, %d): %v", name, tok, err)
	}
}

func renew(t *testing.T, b *redissimba.Backend, id driver.ID, known uint64) driver.RenewReply {
	t.Helper()
	r, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id, KnownVersion: known})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return r
}

func TestOpenRenewRemaining(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		o, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(o.ID) != 32 {
			t.Errorf("ID = %q, want 32 hex characters", o.ID)
		}
		if o.Remaining <= time.Second || o.Remaining > 2*time.Second {
			t.Errorf("Open Remaining = %v, want in (1s, 2s]", o.Remaining)
		}
		r := renew(t, b, o.ID, 0)
		if !r.Full || len(r.Leases) != 0 || r.Version == 0 {
			t.Errorf("Renew(known 0) = %+v, want Full, no leases, Version != 0", r)
		}
		if r.Remaining <= time.Second || r.Remaining > 2*time.Second {
			t.Errorf("Renew Remaining = %v, want in (1s, 2s]", r.Remaining)
		}
		r2 := renew(t, b, o.ID, r.Version)
		if r2.Full || r2.Leases != nil || r2.Version != r.Version {
			t.Errorf("Renew(known %d) = %+v, want same version without list", r.Version, r2)
		}
		o2 := open(t, b, time.Second)
		if o2 == o.ID {
			t.Errorf("two Opens gave the same id %s", o2)
		}
	})
}

func TestExpiredAnswersExpiredForever(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		lease := 150 * time.Millisecond
		id := open(t, b, lease)
		acquire(t, b, id, "x")
		waitTimer(2 * lease)
		for i := 0; i < 3; i++ {
			if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id}); !errors.Is(err, driver.ErrExpired) {
				t.Fatalf("Renew after expiry #%d = %v, want ErrExpired", i, err)
			}
			if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"y"}}); !errors.Is(err, driver.ErrExpired) {
				t.Fatalf("Acquire after expiry #%d = %v, want ErrExpired", i, err)
			}
		}
		// The failed Acquire took nothing: another session gets y.
		other := open(t, b, time.Second)
		if tok := acquire(t, b, other, "y")[0]; tok == 0 {
			t.Error("y was not free after an expired session's Acquire")
		}
		for _, bad := range []driver.ID{"", "not-hex", "0123456789abcdef0123456789abcdeg", driver.ID(fmt.Sprintf("%032x", 7))} {
			if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: bad}); !errors.Is(err, driver.ErrExpired) {
				t.Errorf("Renew(%q) = %v, want ErrExpired", bad, err)
			}
			if err := b.Close(ctxT(t), bad); err != nil {
				t.Errorf("Close(%q) = %v, want nil", bad, err)
			}
		}
		if err := b.Close(ctxT(t), id); err != nil {
			t.Errorf("Close(expired) = %v, want nil", err)
		}
	})
}

func TestAcquireExclusionAndRelease(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		a, o := open(t, b, 5*time.Second), open(t, b, 5*time.Second)
		ta := acquire(t, b, a, "x")[0]
		if ta == 0 {
			t.Fatal("A did not get the free lease x")
		}
		if tok := acquire(t, b, o, "x")[0]; tok != 0 {
			t.Fatalf("B got x (token %d) while A holds it", tok)
		}
		if tok := acquire(t, b, a, "x")[0]; tok != ta {
			t.Fatalf("A re-acquiring x got %d, want its token %d", tok, ta)
		}
		release(t, b, a, "x", ta+1) // wrong token: no-op
		release(t, b, o, "x", ta)   // wrong session: no-op
		if tok := acquire(t, b, o, "x")[0]; tok != 0 {
			t.Fatalf("B got x (token %d) after a mismatched release", tok)
		}
		release(t, b, a, "x", ta)
		tb := acquire(t, b, o, "x")[0]
		if tb <= ta {
			t.Fatalf("B's token %d after A's release, want > %d", tb, ta)
		}
		release(t, b, a, "x", ta) // late release of A's old term: no-op
		if tok := acquire(t, b, a, "x")[0]; tok != 0 {
			t.Fatalf("A got x (token %d) after its late release; B holds it", tok)
		}
	})
}

func TestTokensRiseStrictly(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		ids := []driver.ID{open(t, b, 5*time.Second), open(t, b, 5*time.Second)}
		var last uint64
		for i := 0; i < 50; i++ {
			id := ids[i%2]
			tok := acquire(t, b, id, "x")[0]
			if tok <= last {
				t.Fatalf("term %d: token %d, want > %d", i, tok, last)
			}
			last = tok
			release(t, b, id, "x", tok)
		}
	})
}

func TestTakeoverOnlyAfterOwnerExpires(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		lease := 200 * time.Millisecond
		a := open(t, b, lease)
		o := open(t, b, 10*time.Second)
		ta := acquire(t, b, a, "x")[0]
		if tok := acquire(t, b, o, "x")[0]; tok != 0 {
			t.Fatalf("B took x from a live session (token %d)", tok)
		}
		waitTimer(lease + 100*time.Millisecond)
		tb := acquire(t, b, o, "x")[0]
		if tb <= ta {
			t.Fatalf("B's token after A expired = %d, want > %d", tb, ta)
		}
		if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: a}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("A's Renew = %v, want ErrExpired", err)
		}
		release(t, b, a, "x", ta) // the expired owner's late release: no-op
		r := renew(t, b, o, 0)
		if len(r.Leases) != 1 || r.Leases[0] != (driver.Lease{Name: "x", Token: tb}) {
			t.Fatalf("B owns %+v, want [x %d]", r.Leases, tb)
		}
	})
}

func TestRenewReportsOwnedSetAndVersion(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		id := open(t, b, 5*time.Second)
		v0 := renew(t, b, id, 0).Version
		toks := acquire(t, b, id, "a", "b", "c")
		r := renew(t, b, id, v0)
		if !r.Full || r.Version == v0 {
			t.Fatalf("after acquire: %+v, want a new version with the full list", r)
		}
		want := []driver.Lease{{Name: "a", Token: toks[0]}, {Name: "b", Token: toks[1]}, {Name: "c", Token: toks[2]}}
		if got := sorted(r.Leases); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Leases = %v, want %v", got, want)
		}
		v1 := r.Version
		acquire(t, b, id, "a") // already owned: no change
		if r := renew(t, b, id, v1); r.Full || r.Version != v1 {
			t.Fatalf("re-acquire changed the set: %+v", r)
		}
		release(t, b, id, "b", toks[1])
		r = renew(t, b, id, v1)
		if r.Version == v1 || r.Version == v0 || len(r.Leases) != 2 {
			t.Fatalf("after release: %+v, want a fresh version and 2 leases", r)
		}
		// Close frees the rest for others.
		if err := b.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		o := open(t, b, 5*time.Second)
		if got := acquire(t, b, o, "a", "c"); got[0] <= toks[0] || got[1] <= toks[2] {
			t.Fatalf("after Close: tokens %v, want above %v", got, toks)
		}
	})
}

func sorted(ls []driver.Lease) []driver.Lease {
	out := append([]driver.Lease(nil), ls...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func TestInvalidNames(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		id := open(t, b, 5*time.Second)
		names := []string{"ok", "bad/name", "", "..", "a}b", "ok2"}
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range r.Results {
			valid := names[i] == "ok" || names[i] == "ok2"
			if valid && (res.Err != nil || res.Token == 0) {
				t.Errorf("%q: %+v, want acquired", names[i], res)
			}
			if !valid && (!errors.Is(res.Err, deadline.ErrInvalidName) || res.Token != 0) {
				t.Errorf("%q: %+v, want ErrInvalidName", names[i], res)
			}
		}
		err = b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x y", Token: 1}}})
		if !errors.Is(err, deadline.ErrInvalidName) {
			t.Errorf("Release(invalid) = %v, want ErrInvalidName", err)
		}
	})
}

func TestNamespacesAreIsolated(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b1, b2 := newBackend(t, c, namespace(t)), newBackend(t, c, namespace(t))
		id1, id2 := open(t, b1, 5*time.Second), open(t, b2, 5*time.Second)
		if acquire(t, b1, id1, "x")[0] == 0 || acquire(t, b2, id2, "x")[0] == 0 {
			t.Fatal("x in two namespaces must be two leases")
		}
		if _, err := b2.Renew(ctxT(t), driver.RenewRequest{ID: id1}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("namespace 2 knows namespace 1's session: %v", err)
		}
	})
}

func TestNew(t *testing.T) {
	c := standalone(t)
	if _, err := redissimba.New(c, "a{b}"); !errors.Is(err, redissimba.ErrInvalidNamespace) {
		t.Errorf("New(a{b}) = %v, want ErrInvalidNamespace", err)
	}
	if _, err := redissimba.New(nil, "ns"); !errors.Is(err, redissimba.ErrClientConfig) {
		t.Errorf("New(nil) = %v, want ErrClientConfig", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = plain.Close() }()
	if _, err := redissimba.New(plain, "ns"); !errors.Is(err, redissimba.ErrClientConfig) {
		t.Errorf("New(client without ContextTimeoutEnabled) = %v, want ErrClientConfig", err)
	}
	if _, err := redissimba.New(c, "ns", redissimba.WithSubscribeTimeout(0)); err == nil {
		t.Error("New with subscribe timeout 0 succeeded")
	}
	b := newBackend(t, c, "ns-1")
	if b.Namespace() != "ns-1" {
		t.Errorf("Namespace() = %q", b.Namespace())
	}
	if _, err := b.Open(ctxT(t), driver.OpenRequest{}); err == nil {
		t.Error("Open with zero lease succeeded")
	}
}

// countCalls counts the commands a client sends (pipelines count each
// command), so tests can check "one call per operation".
type countCalls struct{ n atomic.Int64 }

func (h *countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func TestOneCallPerOperationWith10000Leases(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		h := &countCalls{}
		c.AddHook(h)
		b := newBackend(t, c, namespace(t))
		id := open(t, b, 10*time.Second)
		names := make([]string, 10000)
		for i := range names {
			names[i] = fmt.Sprintf("lease-%05d", i)
		}
		// Warm the renew script and, on the node serving this namespace, the
		// acquire function: a node that has not loaded the library answers
		// "Function not found" once, and the second FCALL after the load is
		// not what this test counts.
		renew(t, b, id, 0)
		release(t, b, id, "warm", acquire(t, b, id, "warm")[0])
		before := h.n.Load()
		toks := acquire(t, b, id, names...)
		if n := h.n.Load() - before; n != 1 {
			t.Errorf("Acquire of 10000 names made %d calls, want 1", n)
		}
		for i, tok := range toks {
			if tok == 0 {
				t.Fatalf("%s not acquired", names[i])
			}
		}
		before = h.n.Load()
		full := renew(t, b, id, 0)
		if n := h.n.Load() - before; n != 1 {
			t.Errorf("full Renew made %d calls, want 1", n)
		}
		if len(full.Leases) != 10000 {
			t.Fatalf("Renew listed %d leases, want 10000", len(full.Leases))
		}
		before = h.n.Load()
		r := renew(t, b, id, full.Version)
		if n := h.n.Load() - before; n != 1 || r.Full {
			t.Errorf("Renew at known version: %d calls, Full=%v; want 1 call, no list", n, r.Full)
		}
		if err := b.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	})
}

func TestScriptsReloadAfterFlush(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t))
		id := open(t, b, 5*time.Second)
		flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
		var err error
		switch cc := c.(type) {
		case *redis.ClusterClient:
			err = cc.ForEachMaster(ctxT(t), flush)
		case *redis.Client:
			err = flush(ctxT(t), cc)
		}
		if err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		if tok := acquire(t, b, id, "x")[0]; tok == 0 {
			t.Fatal("Acquire after SCRIPT FLUSH failed to take a free lease")
		}
		renew(t, b, id, 0)
	})
}

// notices collects what a subscription delivers.
type notices chan driver.Notice

func subscribe(t *testing.T, b *redissimba.Backend) notices {
	t.Helper()
	ch := make(notices, 1000)
	stop, err := b.Subscribe(func(n driver.Notice) {
		select {
		case ch <- n:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(stop)
	return ch
}

// await returns the first notice for which match is true, failing after 5s.
func (ch notices) await(t *testing.T, what string, match func(driver.Notice) bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case n := <-ch:
			if match(n) {
				return
			}
		case <-timeout:
			t.Fatalf("no notice %s within 5s", what)
		}
	}
}

// waitFor makes a session of b ask for names held by another session and
// be refused, so that their next release or close publishes them (ADR
// 0147: a release nobody waits for sends no notice).
func waitFor(t *testing.T, b *redissimba.Backend, names ...string) {
	t.Helper()
	w := open(t, b, 5*time.Second)
	for i, tok := range acquire(t, b, w, names...) {
		if tok != 0 {
			t.Fatalf("waiter acquired %q, held by another session (token %d)", names[i], tok)
		}
	}
}

// acquireWaited acquires name for id and has another session of b refused
// it, for a release that publishes; it returns the token.
func acquireWaited(t *testing.T, b *redissimba.Backend, id driver.ID, name string) uint64 {
	t.Helper()
	tok := acquire(t, b, id, name)[0]
	waitFor(t, b, name)
	return tok
}

func TestBroadcastRelease(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		a, o := newBackend(t, c, ns), newBackend(t, c, ns)
		got := subscribe(t, o)
		got2 := subscribe(t, o) // a second subscriber shares the one subscription
		id := open(t, a, 5*time.Second)
		toks := acquire(t, a, id, "x", "y")
		waitFor(t, o, "x", "y")
		release(t, a, id, "x", toks[0])
		got.await(t, "for x", func(n driver.Notice) bool { return n.Name == "x" })
		got2.await(t, "for x on the second subscriber", func(n driver.Notice) bool { return n.Name == "x" })
		if err := a.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		got.await(t, "for y after Close", func(n driver.Notice) bool { return n.Name == "y" })
		// Another namespace's releases do not reach us.
		other := newBackend(t, c, namespace(t))
		oid := open(t, other, 5*time.Second)
		release(t, other, oid, "z", acquireWaited(t, other, oid, "z"))
		release(t, a, open(t, a, 5*time.Second), "w", 0) // no-op: publishes nothing
		id2 := open(t, a, 5*time.Second)
		release(t, a, id2, "nowait", acquire(t, a, id2, "nowait")[0]) // nobody refused: no notice
		release(t, a, id2, "end", acquireWaited(t, a, id2, "end"))
		got.await(t, "for end", func(n driver.Notice) bool {
			if n.Name == "z" || n.Name == "w" || n.Name == "nowait" {
				t.Errorf("got notice %q from another namespace, a no-op release or a release nobody waited for", n.Name)
			}
			return n.Name == "end"
		})
	})
}

func TestSubscriptionReconnectAnnouncesPossibleLoss(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns)
		got := subscribe(t, b)
		kill := func(ctx context.Context, c *redis.Client) error {
			return c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
		}
		var err error
		switch cc := c.(type) {
		case *redis.ClusterClient:
			err = cc.ForEachShard(ctxT(t), kill)
		case *redis.Client:
			err = kill(ctxT(t), cc)
		}
		if err != nil {
			t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
		}
		got.await(t, "with an empty name after the reconnect", func(n driver.Notice) bool { return n.Name == "" })
		id := open(t, b, 5*time.Second)
		release(t, b, id, "x", acquireWaited(t, b, id, "x"))
		got.await(t, "for x after the reconnect", func(n driver.Notice) bool { return n.Name == "x" })
	})
}

func TestSubscribeStopThenResubscribe(t *testing.T) {
	b := newBackend(t, standalone(t), namespace(t))
	var calls atomic.Int64
	stop, err := b.Subscribe(func(driver.Notice) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stop() // idempotent
	id := open(t, b, 5*time.Second)
	release(t, b, id, "x", acquireWaited(t, b, id, "x"))
	got := subscribe(t, b) // a fresh subscription after the last one stopped
	release(t, b, id, "y", acquireWaited(t, b, id, "y"))
	got.await(t, "for y", func(n driver.Notice) bool { return n.Name == "y" })
	if n := calls.Load(); n != 0 {
		t.Errorf("stopped subscriber called %d times", n)
	}
	if _, err := b.Subscribe(nil); err == nil {
		t.Error("Subscribe(nil) succeeded")
	}
}

// A subscriber may stop its own subscription from inside its callback
// (the engine's Close can run there); and a stop from elsewhere waits for
// a callback in progress.
func TestSubscribeStopFromCallbackAndWhileRunning(t *testing.T) {
	b := newBackend(t, standalone(t), namespace(t))
	id := open(t, b, 5*time.Second)

	stopped := make(chan struct{})
	var stop func()
	var err error
	stop, err = b.Subscribe(func(n driver.Notice) {
		if n.Name == "self" {
			stop() // must not deadlock
			close(stopped)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	release(t, b, id, "self", acquireWaited(t, b, id, "self"))
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop from inside the callback did not return within 5s")
	}

	entered, unblock := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	stop2, err := b.Subscribe(func(n driver.Notice) {
		if n.Name == "slow" {
			close(entered)
			<-unblock
			returned.Store(true)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	release(t, b, id, "slow", acquireWaited(t, b, id, "slow"))
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice for slow within 5s")
	}
	stopDone := make(chan struct{})
	go func() { stop2(); close(stopDone) }()
	select {
	case <-stopDone:
		t.Fatal("stop returned while the callback was still running")
	case <-time.After(100 * time.Millisecond): // stop must still be waiting
	}
	close(unblock)
	select {
	case <-stopDone:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return after the callback did")
	}
	if !returned.Load() {
		t.Fatal("stop returned before the callback had")
	}
}

// The owner a Backend remembers for a name (its hint, ADR 0131) only saves
// a call: a hint that names a former owner never lets the script judge the
// current one by the former's key. A holds x while B's backend looks (its
// hint becomes A), A closes, C takes x; B's next attempt declares A's key,
// gone, and must still see C alive.
func TestStaleOwnerHintNeverTakesOver(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		bb := newBackend(t, c, ns) // B's process: keeps the hints
		other := newBackend(t, c, ns)
		a := open(t, other, 10*time.Second)
		b := open(t, bb, 10*time.Second)
		cs := open(t, other, 10*time.Second)
		acquire(t, other, a, "x")
		if tok := acquire(t, bb, b, "x")[0]; tok != 0 {
			t.Fatalf("B took x from live A (token %d)", tok)
		}
		if err := other.Close(ctxT(t), a); err != nil {
			t.Fatal(err)
		}
		tc := acquire(t, other, cs, "x")[0]
		if tc == 0 {
			t.Fatal("C did not get x after A closed")
		}
		if tok := acquire(t, bb, b, "x")[0]; tok != 0 {
			t.Fatalf("B took x (token %d) from live C, judging it by its stale hint A", tok)
		}
		if r := renew(t, other, cs, 0); len(r.Leases) != 1 || r.Leases[0] != (driver.Lease{Name: "x", Token: tc}) {
			t.Fatalf("C owns %+v, want [x %d]", r.Leases, tc)
		}
	})
}

// A refused Acquire is told of the name's next release even when the
// lease changed hands without a release in between (ADR 0147): W is
// refused x while A holds it; A's session ends without a release (its key
// gone, as when it expires); C takes x over; C's release must publish x,
// since W still waits. A grant that cleared the waited-for mark would
// leave W to its poll.
func TestNoticeAfterTakeoverReachesEarlierWaiter(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		wb, other := newBackend(t, c, ns), newBackend(t, c, ns)
		got := subscribe(t, wb)
		a := open(t, other, 10*time.Second)
		acquire(t, other, a, "x")
		w := open(t, wb, 10*time.Second)
		if tok := acquire(t, wb, w, "x")[0]; tok != 0 {
			t.Fatalf("W took x from live A (token %d)", tok)
		}
		if err := c.Del(ctxT(t), "simba:{"+ns+"}:s:"+string(a)).Err(); err != nil {
			t.Fatal(err)
		}
		cs := open(t, other, 10*time.Second)
		tc := acquire(t, other, cs, "x")[0]
		if tc == 0 {
			t.Fatal("C did not take x over from A's ended session")
		}
		release(t, other, cs, "x", tc)
		got.await(t, "for x after C's release (W was refused x before C took it)", func(n driver.Notice) bool { return n.Name == "x" })
	})
}

// A notice clears the waited-for mark, and the next refusal sets it again:
// W is refused, A releases (notice), A takes x again, W is refused again,
// A closes (notice again); a release after that, with nobody refused since,
// publishes nothing.
func TestNoticeMarkIsSetAgainByTheNextRefusal(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		wb, ab := newBackend(t, c, ns), newBackend(t, c, ns)
		got := subscribe(t, wb)
		a := open(t, ab, 10*time.Second)
		w := open(t, wb, 10*time.Second)
		refused := func() {
			t.Helper()
			if tok := acquire(t, wb, w, "x")[0]; tok != 0 {
				t.Fatalf("W took x from live A (token %d)", tok)
			}
		}
		tok := acquire(t, ab, a, "x")[0]
		refused()
		release(t, ab, a, "x", tok)
		got.await(t, "for x after the first release", func(n driver.Notice) bool { return n.Name == "x" })
		acquire(t, ab, a, "x")
		refused()
		if err := ab.Close(ctxT(t), a); err != nil {
			t.Fatal(err)
		}
		got.await(t, "for x after the close that followed the second refusal", func(n driver.Notice) bool { return n.Name == "x" })
		b := open(t, ab, 10*time.Second)
		release(t, ab, b, "x", acquire(t, ab, b, "x")[0]) // nobody refused since: no notice
		release(t, ab, b, "end", acquireWaited(t, ab, b, "end"))
		got.await(t, "for end", func(n driver.Notice) bool {
			if n.Name == "x" {
				t.Error("a release of x nobody was refused since the last notice published it")
			}
			return n.Name == "end"
		})
	})
}
