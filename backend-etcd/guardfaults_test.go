package etcdsimba_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// markedOn reports whether name has a lock-delay marker in ns.
func markedOn(t *testing.T, cli *clientv3.Client, ns, name string) bool {
	t.Helper()
	r, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/d/"+name)
	if err != nil {
		t.Fatalf("read %s's marker: %v", name, err)
	}
	return len(r.Kvs) > 0
}

// TestRevokeGuardRetriesAFailedMark: the guard comes back on (a renewal's
// Status shows an affected member) at a moment the cluster cannot take
// the marker of x, a live term granted without it: the request is lost
// on its way, as during an election or a network blip, which is when a
// replaced or downgraded member shows up. The term must still get its
// marker once renewals get through again: otherwise it stays unguarded
// for as long as it lives, and an early revocation of its holder's etcd
// lease (etcd-io/etcd#15247) hands x to a candidate while the holder
// still believes in its term (ADR 0305's "turning on marks the live
// terms" had no second try).
func TestRevokeGuardRetriesAFailedMark(t *testing.T) {
	const lease = 3 * time.Second
	cli := newClient(t, single(t))
	l := &lossy{}
	lcli, err := clientv3.New(clientv3.Config{Endpoints: single(t), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(l.dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lcli.Close() })
	ns := newNamespace(t)
	var downgraded atomic.Bool
	var log syncBuffer
	hb := newBackend(t, lcli, ns, etcdsimba.WithMaxLease(lease),
		etcdsimba.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	etcdsimba.JudgeVersionsForTest(hb, func(string) bool { return downgraded.Load() })
	cb := newBackendNoInit(t, cli, ns, etcdsimba.WithMaxLease(lease))
	within := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not within 10 s: %s", what)
			}
		}
	}
	holder := openOn(t, hb, lease)
	within("the guard off once every member is proven fixed", func() bool { return etcdsimba.VersionsChecked(hb) && !etcdsimba.GuardOn(hb) })
	x := holder.mustAcquire("x")
	if markedOn(t, cli, ns, "x") {
		t.Fatal("x, granted with the guard off, has a marker")
	}

	// The member "downgrades"; the pass that marks the live terms loses
	// its request.
	l.armDrop([]byte(`"delay_ms"`))
	fired := l.fired
	downgraded.Store(true)
	_, _ = holder.renew(5 * time.Second)
	if !etcdsimba.GuardOn(hb) {
		t.Fatal("the guard is still off after a renewal's Status showed an affected version")
	}
	within("the failed mark of x logged", func() bool {
		select {
		case <-fired:
		default:
			return false
		}
		return strings.Contains(log.String(), "could not get the revoke guard's marker")
	})

	// Renewals get through again, as the engine sends them.
	within("x's marker, once renewals get through again", func() bool {
		if _, err := holder.renew(2 * time.Second); err != nil {
			t.Logf("renew: %v", err)
		}
		return markedOn(t, cli, ns, "x")
	})

	// The early revocation: the candidate waits out the holder's belief.
	sent := time.Now()
	r, err := holder.renew(5 * time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	belief := sent.Add(r.Remaining)
	hl, _ := parseLease(string(holder.id))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), hl); err != nil {
		t.Fatalf("revoke the holder's etcd lease: %v", err)
	}
	holdsUntil(t, openOn(t, cb, lease), "x", x, belief, lease)
}

// TestLostGrantCleanupTakesItsMarker: a grant whose reply is lost leaves
// a lease key on the session's etcd lease that nobody was told of; the
// namespace watch deletes it. Under the revoke guard (and with a
// lock-delay) the granting transaction also put the name's marker, and
// while the key stands the marker is that term's: the cleanup must take
// it too, as a release does. Left behind, it made the first candidate
// start a delay of the session's lease on a name nobody held, on every
// lost grant reply (the guard is on by default on affected etcd).
func TestLostGrantCleanupTakesItsMarker(t *testing.T) {
	const lease = 5 * time.Second
	cli := newClient(t, single(t))
	l := &lossy{}
	lcli, err := clientv3.New(clientv3.Config{Endpoints: single(t), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(l.dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lcli.Close() })
	ns := newNamespace(t)
	opts := []etcdsimba.Option{etcdsimba.WithMaxLease(lease), etcdsimba.WithRevokeGuard()}
	hb := newBackend(t, lcli, ns, opts...)
	cb := newBackendNoInit(t, cli, ns, opts...)
	holder, cand := openOn(t, hb, lease), openOn(t, cb, lease)
	l.arm([]byte(`"delay_ms"`))
	fired := l.fired
	if tok, _, err := holder.acquire("x"); err == nil && tok != 0 {
		t.Fatalf("granted x (token %d) although the grant's reply was lost", tok)
	}
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the grant's transaction was never sent")
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/l/x")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the lease key of the lost grant is still there after 10 s")
		}
	}
	if markedOn(t, cli, ns, "x") {
		t.Fatal("the lost grant's key was deleted, its marker left: the name waits a lease that nobody holds")
	}
	cand.mustAcquire("x")
}

// TestRevokeGuardMarkerCoversTheGrant: the guard's marker records the
// session's grant, the most a reply reports, so that the delay it starts
// outlasts the holder's belief. A lease asked for with a fraction of a
// millisecond (2.0005 s: reported whole, its etcd lease 3 s) must not be
// recorded short: the marker counts whole milliseconds, rounded up, and
// the delay's etcd lease whole seconds from that.
func TestRevokeGuardMarkerCoversTheGrant(t *testing.T) {
	const lease = 2*time.Second + 500*time.Microsecond
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLease(3*time.Second), etcdsimba.WithRevokeGuard())
	r, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s := &sessionOn{t: t, b: b, id: r.ID}
	s.mustAcquire("x")
	rr, err := s.renew(5 * time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	m, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/d/x")
	if err != nil || len(m.Kvs) != 1 {
		t.Fatalf("x's marker: %v, %v", m, err)
	}
	var v struct {
		DelayMS int64 `json:"delay_ms"`
	}
	if err := json.Unmarshal(m.Kvs[0].Value, &v); err != nil {
		t.Fatalf("x's marker %q: %v", m.Kvs[0].Value, err)
	}
	if d := time.Duration(v.DelayMS) * time.Millisecond; d < r.Remaining || d < rr.Remaining {
		t.Fatalf("x's marker records %v; the holder was granted %v at Open and %v at a renewal: its belief outlasts the delay", d, r.Remaining, rr.Remaining)
	}
}

// gated is a dialer that, once armed, holds the next connection it is
// asked for until the test lets it go: a member slow to answer a version
// check, with no timer.
type gated struct {
	mu         sync.Mutex
	hold, held chan struct{}
}

func (g *gated) arm() (held, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.held = make(chan struct{}), make(chan struct{})
	return g.held, g.hold
}

func (g *gated) dial(ctx context.Context, addr string) (net.Conn, error) {
	g.mu.Lock()
	hold, held := g.hold, g.held
	g.hold, g.held = nil, nil
	g.mu.Unlock()
	if hold != nil {
		close(held)
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// TestRevokeGuardCheckVetoedByAReplyDuringIt: a version check that was
// running when a Status reply showed an affected member does not turn
// the guard off (ADR 0305: "a check that was running when such a reply
// came in does not turn it off either"), also when the guard was on as
// the check began: the check may have read that member before it was
// downgraded. The check is held on its way to the member (a slow
// answer) while a renewal's Status shows the affected version.
func TestRevokeGuardCheckVetoedByAReplyDuringIt(t *testing.T) {
	const lease = 3 * time.Second
	g := &gated{}
	gcli, err := clientv3.New(clientv3.Config{Endpoints: single(t), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(g.dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gcli.Close() })
	var downgraded atomic.Bool
	hb := newBackend(t, gcli, newNamespace(t), etcdsimba.WithMaxLease(lease))
	etcdsimba.JudgeVersionsForTest(hb, func(string) bool { return downgraded.Load() })
	within := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not within 10 s: %s", what)
			}
		}
	}
	holder := openOn(t, hb, lease)
	within("the guard off once every member is proven fixed", func() bool { return etcdsimba.VersionsChecked(hb) && !etcdsimba.GuardOn(hb) })
	downgraded.Store(true)
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if !etcdsimba.GuardOn(hb) {
		t.Fatal("the guard is still off after a renewal's Status showed an affected version")
	}

	// A check starts with the guard on, and is held on its way to the member.
	downgraded.Store(false)
	held, release := g.arm()
	etcdsimba.RecheckVersionsForTest(hb)
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the version check never asked the member")
	}
	// A renewal's Status shows the member affected while the check runs.
	downgraded.Store(true)
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	downgraded.Store(false)
	close(release)
	within("the held check's end", func() bool { return !etcdsimba.VersionCheckRunning(hb) })
	if !etcdsimba.GuardOn(hb) {
		t.Fatal("the check turned the guard off although a reply during it showed an affected member")
	}
}
