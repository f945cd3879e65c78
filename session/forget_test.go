package session_test

import (
	"context"
	"github.com/simba-go/simba/session/driver"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// useOnce claims name, waits for its term and drops the claim (which
// releases the lease): a lock per entity, used once.
func useOnce(t *testing.T, f *fixture, name string) {
	t.Helper()
	c, r := f.claim(name)
	if len(r.terms()) != 1 {
		t.Fatalf("%q: %d terms, want 1", name, len(r.terms()))
	}
	layer.MustOf(f.s).Do(func() { c.Drop() })
	synctest.Wait()
}

// ADR 0295: names locked once and released leave at most RetainNames
// token entries in the engine, however many were used (issue 23: a lock
// per entity through one long-lived Session kept ~150 bytes per name
// forever).
func TestEngineForgetsRetiredNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		n := 3 * session.RetainNames
		for i := range n {
			useOnce(t, f, "order:"+strconv.Itoa(i))
		}
		tokens, released := session.TokenEntries(f.s)
		if tokens > session.RetainNames || released > session.RetainNames {
			t.Fatalf("after %d names used once the engine keeps %d token and %d released entries, want at most %d each",
				n, tokens, released, session.RetainNames)
		}
		if !session.HasTokenEntry(f.s, "order:"+strconv.Itoa(n-1)) {
			t.Fatal("the name released last was forgotten at once: its entries must outlive the release")
		}
	})
}

// A name whose claim is registered keeps its entries however many other
// names retire meanwhile, even one retired before (dropped, then claimed
// again): its next term's token is checked against its last one.
func TestEngineKeepsClaimedNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		useOnce(t, f, "jobs")
		c, r := f.claim("jobs")
		if len(r.terms()) != 1 {
			t.Fatalf("jobs claimed again: %d terms, want 1", len(r.terms()))
		}
		for i := range 2 * session.RetainNames {
			useOnce(t, f, "order:"+strconv.Itoa(i))
		}
		if !session.HasTokenEntry(f.s, "jobs") {
			t.Fatal("a registered claim's token entry was forgotten: its next term's token is no longer checked against its last")
		}
		layer.MustOf(f.s).Do(func() { c.Release(term.Stopped, nil) })
		synctest.Wait()
	})
}

// A name dropped and claimed again at once, on a backend that answers with
// the token just released, is still refused: the retained entries carry
// the check across the drop (within the last RetainNames retired names).
func TestTokenReleasedBeforeADropIsRefusedAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		sb := &staleToken{Backend: b}
		s := openDecorated(t, sb)
		r := &recorder{}
		c, _ := layer.MustOf(s).Claim("jobs", r)
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		first := r.terms()[0]
		layer.MustOf(s).Do(func() { c.Drop() })
		synctest.Wait()
		sb.mu.Lock()
		sb.stale = first.Token()
		sb.mu.Unlock()
		r2 := &recorder{}
		c2, err := layer.MustOf(s).Claim("jobs", r2)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c2.Want(true) })
		advance(60e9) // many candidate ticks, each answered with the released token
		if n := len(r2.terms()); n != 0 {
			t.Fatalf("%d terms after the drop; the token released before it became a term again", n)
		}
	})
}

// releaseHeld holds the Release of one name until let is closed, and can
// answer that name's acquisitions with a given token, as a backend still
// holding the lease under this session answers "already yours".
type releaseHeld struct {
	*memory.Backend
	name  string
	let   chan struct{}
	mu    sync.Mutex
	token uint64
}

func (b *releaseHeld) Release(ctx context.Context, req driver.ReleaseRequest) error {
	for _, l := range req.Leases {
		if l.Name == b.name {
			<-b.let
		}
	}
	return b.Backend.Release(ctx, req)
}

func (b *releaseHeld) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	b.mu.Lock()
	token := b.token
	b.mu.Unlock()
	if token == 0 || len(req.Names) != 1 || req.Names[0] != b.name {
		return b.Backend.Acquire(ctx, req)
	}
	return driver.AcquireReply{Results: []driver.AcquireResult{{Name: b.name, Token: token}}}, nil
}

// A name whose release is still on its way keeps its entries however many
// names retire meanwhile: claimed again before the release reaches the
// backend, it is answered "already yours" under the released token, which
// must not become a term (the release, when it lands, frees that lease).
func TestEngineKeepsNamesWhoseReleaseIsOnItsWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &releaseHeld{Backend: mb, name: "jobs", let: make(chan struct{})}
		s := openDecorated(t, b)
		t.Cleanup(func() { close(b.let) }) // before the Close openDecorated registered
		f := &fixture{t: t, s: s, ev: &events{}}
		c, r := f.claim("jobs")
		first := r.terms()[0]
		layer.MustOf(s).Do(func() { c.Drop() }) // its release is held at the backend
		synctest.Wait()
		for i := range 2 * session.RetainNames {
			useOnce(t, f, "order:"+strconv.Itoa(i))
		}
		b.mu.Lock()
		b.token = first.Token()
		b.mu.Unlock()
		_, r2 := f.claim("jobs")
		if n := len(r2.terms()); n != 0 {
			t.Fatalf("%d terms: the token whose release is on its way became a term again", n)
		}
	})
}

// A name kept because its release was on its way is forgotten in its turn
// once the release has answered: it is retired again then.
func TestEngineForgetsANameOnceItsReleaseAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &releaseHeld{Backend: mb, name: "jobs", let: make(chan struct{})}
		s := openDecorated(t, b)
		f := &fixture{t: t, s: s, ev: &events{}}
		c, _ := f.claim("jobs")
		layer.MustOf(s).Do(func() { c.Drop() })
		synctest.Wait()
		for i := range 2 * session.RetainNames {
			useOnce(t, f, "order:"+strconv.Itoa(i))
		}
		close(b.let)
		synctest.Wait()
		for i := range 2 * session.RetainNames {
			useOnce(t, f, "item:"+strconv.Itoa(i))
		}
		if session.HasTokenEntry(s, "jobs") {
			t.Fatal("the name whose release answered late is kept forever")
		}
	})
}
