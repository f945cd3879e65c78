// Package sqltest holds the test bodies that both SQL dialects run against
// their real servers, beyond the conformance kit: the properties that come
// from this module's SQL (lock order, lock-then-clock, one round trip,
// concurrent schema creation). Only tests import it.
package sqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// Harness is one dialect on one real server.
type Harness struct {
	// New returns a backend in the namespace prefix, creating its schema;
	// the caller calls close. It must return the error of an invalid prefix.
	New func(ctx context.Context, prefix string) (b driver.Backend, close func(), err error)
	// NewCounted returns a backend in a fresh namespace whose only
	// database connection is counted by w (schema dropped when t ends).
	NewCounted func(t testing.TB, w *WireCounter) driver.Backend
	// Drop removes the namespace's tables and routines.
	Drop func(t testing.TB, prefix string)
	// LockSession holds the lock of the session's row in another
	// transaction until unlock is called.
	LockSession func(t *testing.T, prefix string, id driver.ID) (unlock func())
	// NewCutOff returns a backend in the namespace prefix (schema created,
	// dropped when t ends) whose client, when a call's context ends,
	// stops waiting without telling the server, as a client cut off from
	// it would: PostgreSQL sends no cancel request; MySQL's driver never
	// does.
	NewCutOff func(t *testing.T, prefix string) driver.Backend
	// Busy counts the server's statements of the namespace prefix still
	// running (waiting on a lock, say), other than the caller's.
	Busy func(t *testing.T, prefix string) int
}

// FreshPrefix returns a table prefix no other test uses.
func FreshPrefix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Ctx returns a context that ends with t, or after 30s.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Run runs every shared test against h.
func Run(t *testing.T, h Harness) {
	t.Run("InvalidPrefixRefused", func(t *testing.T) { invalidPrefix(t, h) })
	t.Run("ConcurrentSchemaCreation", func(t *testing.T) { concurrentSchema(t, h) })
	t.Run("VersionChangesWithOwnedSet", func(t *testing.T) { versions(t, h) })
	t.Run("ContendedAcquireNoDeadlock", func(t *testing.T) { contended(t, h) })
	t.Run("RenewAfterLockWaitDoesNotRevive", func(t *testing.T) { lockWait(t, h) })
	t.Run("RenewIsOneRoundTrip", func(t *testing.T) { oneRoundTrip(t, h) })
	t.Run("ClosedAfterShutdown", func(t *testing.T) { closedAfterShutdown(t, h) })
	t.Run("AbandonedCallEndsInTheDatabase", func(t *testing.T) { abandoned(t, h) })
}

// A call whose client gave up (its deadline passed and the server was not
// told) fails in the database within its bound, the caller's deadline,
// instead of waiting for a lock and committing long after, when its reply
// reaches no one (ADR 0135). Here an Acquire, then a Release, waits for its
// session's row, which another transaction holds.
func abandoned(t *testing.T, h Harness) {
	t.Run("Acquire", func(t *testing.T) { abandonedCall(t, h, false) })
	t.Run("Release", func(t *testing.T) { abandonedCall(t, h, true) })
}

func abandonedCall(t *testing.T, h Harness, release bool) {
	prefix := FreshPrefix()
	b := h.NewCutOff(t, prefix)
	id := Open(t, b, time.Minute)
	var tok uint64
	if release {
		tok = Acquire(t, b, id, "x")
	}
	unlock := h.LockSession(t, prefix, id)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	const bound = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(Ctx(t), bound)
	start := time.Now()
	var err error
	if release {
		err = b.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x", Token: tok}}})
	} else {
		_, err = b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"x"}})
	}
	cancel()
	if err == nil {
		t.Fatal("the call succeeded while its session's row was locked by another transaction")
	}
	for n := h.Busy(t, prefix); n > 0; n = h.Busy(t, prefix) {
		if since := time.Since(start); since > bound+1500*time.Millisecond {
			t.Fatalf("%v after a call with a deadline of %v, %d of its statements still run in the database (the client gave up at once: %v)", since, bound, n, err)
		}
		<-time.After(20 * time.Millisecond) // the server's side must end by itself
	}
	unlock()
	locked = false
	hs, err := b.(driver.Inspector).Inspect(Ctx(t), driver.InspectRequest{Names: []string{"x"}})
	switch {
	case err != nil:
		t.Fatal(err)
	case !release && len(hs) != 0:
		t.Fatalf("after the lock was released: holders of x = %+v; the abandoned Acquire must not have committed", hs)
	case release && (len(hs) != 1 || hs[0].Token != tok):
		t.Fatalf("after the lock was released: holders of x = %+v, want still held under %d; the abandoned Release must not have committed", hs, tok)
	}
}

// After the backend value is shut down, every call fails with ErrClosed.
func closedAfterShutdown(t *testing.T, h Harness) {
	prefix := FreshPrefix()
	b, shutdown, err := h.New(Ctx(t), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Drop(t, prefix) })
	id := Open(t, b, 10*time.Second)
	shutdown()
	if _, err := b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Second}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Open after shutdown = %v, want ErrClosed", err)
	}
	if _, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Renew after shutdown = %v, want ErrClosed", err)
	}
	if _, err := b.Acquire(Ctx(t), driver.AcquireRequest{ID: id, Names: []string{"a"}}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Acquire after shutdown = %v, want ErrClosed", err)
	}
	if err := b.Close(Ctx(t), id); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Close after shutdown = %v, want ErrClosed", err)
	}
}

func (h Harness) backend(t *testing.T, prefix string) driver.Backend {
	t.Helper()
	if prefix == "" {
		prefix = FreshPrefix()
	}
	b, closeB, err := h.New(Ctx(t), prefix)
	if err != nil {
		t.Fatalf("New(%q): %v", prefix, err)
	}
	t.Cleanup(func() {
		closeB()
		h.Drop(t, prefix)
	})
	return b
}

// Open opens a session and checks the reply.
func Open(t testing.TB, b driver.Backend, lease time.Duration) driver.ID {
	t.Helper()
	rep, err := b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if rep.Remaining <= 0 || rep.Remaining > lease {
		t.Fatalf("Open: Remaining = %v, want in (0, %v]", rep.Remaining, lease)
	}
	return rep.ID
}

// Acquire acquires one name and returns its token (0: not acquired).
func Acquire(t testing.TB, b driver.Backend, id driver.ID, name string) uint64 {
	t.Helper()
	rep, err := b.Acquire(Ctx(t), driver.AcquireRequest{ID: id, Names: []string{name}})
	if err != nil {
		t.Fatalf("Acquire(%s): %v", name, err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Err != nil || rep.Results[0].Name != name {
		t.Fatalf("Acquire(%s) = %+v", name, rep)
	}
	return rep.Results[0].Token
}

func invalidPrefix(t *testing.T, h Harness) {
	for _, p := range []string{"", "Upper", "1abc", "a-b", "x; DROP TABLE y", "abcdefghijklmnopqrstuvwxyz0123456"} {
		_, _, err := h.New(Ctx(t), p)
		if !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
			t.Errorf("New(prefix %q) = %v, want ErrInvalidPrefix", p, err)
		}
	}
}

func concurrentSchema(t *testing.T, h Harness) {
	prefix := FreshPrefix()
	t.Cleanup(func() { h.Drop(t, prefix) })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			b, closeB, err := h.New(Ctx(t), prefix)
			if err == nil {
				_, err = b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Second})
				closeB()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("New #%d with the same prefix at once: %v", i, err)
		}
	}
}

func versions(t *testing.T, h Harness) {
	b := h.backend(t, "")
	id := Open(t, b, 10*time.Second)
	seen := map[uint64]bool{}
	renew := func(known uint64, wantFull bool, want []driver.Lease) uint64 {
		t.Helper()
		r, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id, KnownVersion: known})
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if r.Version == 0 || r.Full != wantFull || r.Remaining <= 9*time.Second || r.Remaining > 10*time.Second {
			t.Fatalf("Renew(known %d) = %+v, want version > 0, full %v, remaining ≈ 10s", known, r, wantFull)
		}
		if wantFull && fmt.Sprint(r.Leases) != fmt.Sprint(want) {
			t.Fatalf("Renew listed %v, want %v", r.Leases, want)
		}
		return r.Version
	}
	v := renew(0, true, []driver.Lease{})
	seen[v] = true
	if renew(v, false, nil) != v {
		t.Fatal("version changed without a change of the owned set")
	}
	tok := Acquire(t, b, id, "a")
	v2 := renew(v, true, []driver.Lease{{Name: "a", Token: tok}})
	if seen[v2] {
		t.Fatalf("version %d reused after an acquisition", v2)
	}
	seen[v2] = true
	if err := b.Release(Ctx(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "a", Token: tok + 1}}}); err != nil {
		t.Fatal(err)
	}
	if renew(v2, false, nil) != v2 {
		t.Fatal("a release with the wrong token changed the version")
	}
	if err := b.Release(Ctx(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "a", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	v3 := renew(v2, true, []driver.Lease{})
	if seen[v3] {
		t.Fatalf("version %d reused after a release", v3)
	}
	err := b.Release(Ctx(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x y", Token: 1}}})
	if !errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("Release(invalid name) = %v, want ErrInvalidName", err)
	}
}

// Sessions competing for overlapping names, each asking in its own order:
// no deadlock error (the backend sorts names; rows are locked in one
// order), and no token is handed out twice.
func contended(t *testing.T, h Harness) {
	b := h.backend(t, "")
	names := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]map[uint64]bool{}
	for _, n := range names {
		seen[n] = map[uint64]bool{}
	}
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			id := Open(t, b, 10*time.Second)
			for i := range 25 {
				req := []string{names[(w+i)%4], names[(w+3*i+1)%4], names[(w+i+2)%4]}
				rep, err := b.Acquire(Ctx(t), driver.AcquireRequest{ID: id, Names: req})
				if err != nil {
					errs <- err
					return
				}
				var rel []driver.Lease
				mu.Lock()
				for _, r := range rep.Results {
					if r.Token != 0 && !seen[r.Name][r.Token] {
						seen[r.Name][r.Token] = true
						rel = append(rel, driver.Lease{Name: r.Name, Token: r.Token})
					} else if r.Token != 0 {
						errs <- fmt.Errorf("name %s: token %d handed out twice", r.Name, r.Token)
					}
				}
				mu.Unlock()
				if err := b.Release(Ctx(t), driver.ReleaseRequest{ID: id, Leases: rel}); err != nil {
					errs <- err
					return
				}
			}
			if err := b.Close(Ctx(t), id); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	total := 0
	for _, s := range seen {
		total += len(s)
	}
	if total == 0 {
		t.Fatal("no acquisition succeeded at all")
	}
}

// A renewal that waits on a lock past the session's expiry must answer
// expired: it reads the clock after it got the lock.
func lockWait(t *testing.T, h Harness) {
	prefix := FreshPrefix()
	b := h.backend(t, prefix)
	const lease = 300 * time.Millisecond
	id := Open(t, b, lease)
	unlock := h.LockSession(t, prefix, id)
	res := make(chan error, 1)
	go func() {
		_, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id})
		res <- err
	}()
	<-time.After(2 * lease) // database time must pass while the renewal waits
	unlock()
	select {
	case err := <-res:
		if !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("Renew after waiting past expiry = %v, want ErrExpired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Renew did not return after the lock was released")
	}
}

func oneRoundTrip(t *testing.T, h Harness) {
	var wc WireCounter
	b := h.NewCounted(t, &wc)
	id := Open(t, b, 60*time.Second)
	for _, n := range []int{1, 100, 10000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("r%d-%05d", n, i)
			}
			if _, err := b.Acquire(Ctx(t), driver.AcquireRequest{ID: id, Names: names}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id}); err != nil { // warm: statement prepared
				t.Fatal(err)
			}
			wc.Reset()
			full, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if trips := wc.Trips.Load(); trips != 1 {
				t.Errorf("full renewal: %d round trips, want 1", trips)
			}
			if len(full.Leases) < n {
				t.Errorf("full renewal listed %d leases, want ≥ %d", len(full.Leases), n)
			}
			wc.Reset()
			short, err := b.Renew(Ctx(t), driver.RenewRequest{ID: id, KnownVersion: full.Version})
			if err != nil {
				t.Fatal(err)
			}
			if trips := wc.Trips.Load(); trips != 1 || short.Full {
				t.Errorf("renewal at a known version: %d round trips, full %v; want 1, false", trips, short.Full)
			}
			if got := wc.Received.Load(); got > 512 {
				t.Errorf("renewal at a known version received %d bytes, want a small constant", got)
			}
		})
	}
}

// WireCounter counts the traffic of the connections it wraps: bytes each
// way, and round trips (a write that follows a read starts a new one).
type WireCounter struct {
	Sent, Received, Trips atomic.Int64
	lastWasRead           atomic.Bool
}

// Reset zeroes the counts.
func (w *WireCounter) Reset() {
	w.Sent.Store(0)
	w.Received.Store(0)
	w.Trips.Store(0)
	w.lastWasRead.Store(true)
}

// Dialer returns a dial function whose connections w counts.
func (w *WireCounter) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, w: w}, nil
	}
}

type countingConn struct {
	net.Conn
	w *WireCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.w.lastWasRead.Swap(false) {
		c.w.Trips.Add(1)
	}
	n, err := c.Conn.Write(p)
	c.w.Sent.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.lastWasRead.Store(true)
	}
	c.w.Received.Add(int64(n))
	return n, err
}

// PortTracker remembers the local ports of the connections its dialer
// opened, so a test can find them on the server (pg_stat_activity's
// client_port, MySQL's processlist host) and kill them.
type PortTracker struct {
	mu    sync.Mutex
	ports map[int]bool
}

// Dialer returns a dial function whose connections t tracks.
func (p *PortTracker) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
			p.mu.Lock()
			if p.ports == nil {
				p.ports = map[int]bool{}
			}
			p.ports[a.Port] = true
			p.mu.Unlock()
		}
		return c, nil
	}
}

// Ports returns the local ports of every connection dialed so far.
func (p *PortTracker) Ports() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, 0, len(p.ports))
	for port := range p.ports {
		out = append(out, port)
	}
	return out
}
