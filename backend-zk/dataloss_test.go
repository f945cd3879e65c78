package zksimba_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// deleteAll deletes path and everything under it as zkCli's deleteall
// does (ZKUtil.deleteRecursive): the subtree listed breadth-first, then
// deleted node by node from the end of that list, the deepest level
// first. The namespace's records are lost while the ensemble runs.
func deleteAll(t testing.TB, conn *zk.Conn, path string) {
	t.Helper()
	tree := []string{path}
	for i := 0; i < len(tree); i++ {
		children, _, err := conn.Children(tree[i])
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		must(t, err)
		for _, c := range children {
			tree = append(tree, tree[i]+"/"+c)
		}
	}
	for i := len(tree) - 1; i >= 0; i-- {
		if err := conn.Delete(tree[i], -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("delete %s: %v", tree[i], err)
		}
	}
}

// quarantined acquires name on a new session of b until the quarantine
// ends, checking that every reply inside it grants nothing, and returns
// the first quarantine announced and the token finally granted.
func quarantined(t *testing.T, b *zksimba.Backend, name string, within time.Duration) (first time.Duration, tok uint64) {
	t.Helper()
	s := open(t, b, 2*time.Second)
	keepAlive(t, b, s.ID, 300*time.Millisecond)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s.ID, Names: []string{name}})
		if err != nil {
			t.Fatalf("Acquire during the quarantine: %v", err)
		}
		got := r.Results[0]
		if r.Quarantine > 0 {
			if got.Token != 0 {
				t.Fatalf("token %d granted in a reply announcing a quarantine of %v", got.Token, r.Quarantine)
			}
			if first == 0 {
				first = r.Quarantine
			}
			<-time.After(min(r.Quarantine, 200*time.Millisecond))
			continue
		}
		if got.Err != nil || got.Token == 0 {
			t.Fatalf("Acquire(%q) after the quarantine = token %d, err %v", name, got.Token, got.Err)
		}
		return first, got.Token
	}
	t.Fatalf("still quarantined after %v", within)
	return 0, 0
}

// An ensemble rebuilt from empty disks restarts its zxids low. A process
// that never saw the namespace before the loss (a new Backend value, no
// memory of earlier tokens) finds the epoch missing: it grants nothing for
// one MaxLease, then hands out tokens above every token from before the
// loss (they went 42 → 4 in another process before epochs).
func TestTokensRiseInEveryProcessAfterEnsembleRebuilt(t *testing.T) {
	srvs := startZK(t, 1)
	srv := srvs[0]
	const maxLease = 2 * time.Second
	root := newRoot(t)
	a := newBackend(t, []string{srv.addr()}, root, zksimba.WithMaxLease(maxLease))
	sess := open(t, a, 2*time.Second)
	// Push the zxid up so that a raw czxid after the loss would be lower.
	var high uint64
	for range 20 {
		high = acquire(t, a, sess.ID, "jobs")[0].Token
		must(t, a.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sess.ID, Leases: []driver.Lease{{Name: "jobs", Token: high}}}))
	}
	high = acquire(t, a, sess.ID, "jobs")[0].Token

	srv.kill()
	must(t, os.RemoveAll(filepath.Join(srv.dir, "data", "version-2")))
	srv.restart()
	srv.waitServing(60 * time.Second)

	// Another process: a Backend value of its own.
	b := newBackendNoInit(t, []string{srv.addr()}, root, zksimba.WithMaxLease(maxLease))
	var first time.Duration
	var tok uint64
	waitUntil(t, 30*time.Second, "a session on the rebuilt server", func() bool {
		_, err := b.Open(ctxT(t, 5*time.Second), driver.OpenRequest{LeaseDuration: 2 * time.Second})
		return err == nil
	})
	first, tok = quarantined(t, b, "jobs", 3*maxLease)
	if first <= 0 || first > maxLease {
		t.Fatalf("first quarantine announced %v, want in (0, %v]", first, maxLease)
	}
	if tok <= high {
		t.Fatalf("token after the rebuild %d, want > %d: tokens never go backwards", tok, high)
	}
	t.Logf("before the loss %d (%#x); after %d (%#x), quarantine %v", high, high, tok, tok, first)
}

// The namespace root deleted under running sessions (an operator's
// deleteall): the holder's next renewal answers ErrExpired, every process
// sees the epoch gone, the first to open again starts a quarantine of one
// MaxLease, and tokens after it are higher.
func TestRootDeletedQuarantines(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const maxLease = 2 * time.Second
	a := newBackend(t, srv, root, zksimba.WithMaxLease(maxLease))
	sa := open(t, a, 2*time.Second)
	before := acquire(t, a, sa.ID, "x")[0].Token
	if before == 0 {
		t.Fatal("no token before the loss")
	}
	c := newBackend(t, srv, root, zksimba.WithMaxLease(maxLease))
	sc := open(t, c, 2*time.Second)
	lostAt := time.Now()
	deleteAll(t, rawConn(t, srv), root)

	if _, err := a.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("holder's Renew after the root was deleted = %v, want ErrExpired", err)
	}
	if _, err := c.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: sc.ID, Names: []string{"x"}}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("another process's Acquire after the root was deleted = %v, want ErrExpired", err)
	}
	first, tok := quarantined(t, c, "x", 3*maxLease)
	if first <= maxLease/2 || first > maxLease {
		t.Fatalf("first quarantine %v, want about %v", first, maxLease)
	}
	if el := time.Since(lostAt); el < maxLease-200*time.Millisecond {
		t.Fatalf("granted %v after the loss, before one MaxLease (%v)", el, maxLease)
	}
	if tok <= before {
		t.Fatalf("token after the loss %d, want > %d", tok, before)
	}
}

// A client from before epochs recreates a deleted root silently, without a
// record. The epoch is gone all the same: the quarantine starts.
func TestRootRecreatedWithoutEpochQuarantines(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const maxLease = 1500 * time.Millisecond
	a := newBackend(t, srv, root, zksimba.WithMaxLease(maxLease))
	sa := open(t, a, 2*time.Second)
	before := acquire(t, a, sa.ID, "x")[0].Token
	c := newBackend(t, srv, root, zksimba.WithMaxLease(maxLease))
	sc := open(t, c, 2*time.Second)
	raw := rawConn(t, srv)
	deleteAll(t, raw, root)
	if _, err := raw.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew after the root was recreated without its epoch = %v, want ErrExpired", err)
	}
	// The root exists, so a create under it would succeed: only the epoch
	// check in the acquiring multi stops a session of the old epoch.
	if r, err := c.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: sc.ID, Names: []string{"x"}}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Acquire of an old epoch's session after the root was recreated = %+v, %v; want ErrExpired", r, err)
	}
	first, tok := quarantined(t, a, "x", 3*maxLease)
	if first <= 0 {
		t.Fatal("no quarantine after the root lost its epoch")
	}
	if tok <= before {
		t.Fatalf("token %d, want > %d", tok, before)
	}
}

// Nothing tells a new namespace from a lost one: without Init, the first
// use waits one MaxLease; after Init, none.
func TestNewNamespaceQuarantinedUnlessInit(t *testing.T) {
	srv := standalone(t)
	const maxLease = time.Second
	first, _ := quarantined(t, newBackendNoInit(t, srv, newRoot(t), zksimba.WithMaxLease(maxLease)), "x", 3*maxLease)
	if first <= 0 {
		t.Fatal("a namespace never initialised granted at once")
	}
	b := newBackend(t, srv, newRoot(t), zksimba.WithMaxLease(maxLease))
	if first, tok := quarantined(t, b, "x", maxLease); first != 0 || tok == 0 {
		t.Fatalf("after Init: quarantine %v, token %d; want none and a token", first, tok)
	}
	// Init again changes nothing.
	s := open(t, b, 2*time.Second)
	must(t, b.Init(ctxT(t, 10*time.Second)))
	if _, err := b.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: s.ID}); err != nil {
		t.Fatalf("Renew after a second Init: %v", err)
	}
}

// Tokens of the scheme before epochs were raw czxids: every epoch token is
// higher, so an upgrade keeps tokens rising.
func TestEpochTokensAboveRawCzxid(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	b := newBackend(t, srv, root)
	s := open(t, b, 2*time.Second)
	tok := acquire(t, b, s.ID, "x")[0].Token
	_, st, err := rawConn(t, srv).Get(root + "/x")
	must(t, err)
	if tok <= uint64(st.Czxid) {
		t.Fatalf("epoch token %d not above the raw czxid %d", tok, st.Czxid)
	}
	if hi := tok >> 32; hi < uint64(st.Ctime/1000)-1 || hi > uint64(st.Ctime/1000) {
		t.Fatalf("token's high part %d, want the epoch's start second (node created at %ds)", hi, st.Ctime/1000)
	}
}

// WithMaxLease caps the session timeout asked for, and refuses a server
// that negotiates more (its minSessionTimeout above the cap).
func TestMaxLeaseCapsTheTimeout(t *testing.T) {
	srv := standalone(t)
	b := newBackend(t, srv, newRoot(t), zksimba.WithMaxLease(3*time.Second))
	r := open(t, b, 10*time.Second)
	if got, _ := b.SessionTimeout(r.ID); got != 3*time.Second {
		t.Fatalf("timeout %v, want the 3s cap", got)
	}
	if r.Remaining != zksimba.Grant(3*time.Second) || r.Nominal != zksimba.Grant(10*time.Second) {
		t.Fatalf("Open = %+v, want Remaining 5/12 of 3s and Nominal 5/12 of 10s", r)
	}
	for _, d := range []time.Duration{0, 999 * time.Millisecond, 1 << 31 * time.Millisecond} {
		if _, err := zksimba.New(srv, "/x", zksimba.WithMaxLease(d)); !errors.Is(err, zksimba.ErrInvalidOption) {
			t.Fatalf("WithMaxLease(%v) = %v, want ErrInvalidOption", d, err)
		}
	}
	// A server whose minSessionTimeout (1.6 s) is above the cap (1 s)
	// negotiates a longer session than the quarantine would cover.
	zks := startZK(t, 1, "minSessionTimeout=1600")
	c := newBackend(t, addrs(zks), newRoot(t), zksimba.WithMaxLease(time.Second))
	if _, err := c.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: time.Second}); !errors.Is(err, zksimba.ErrInvalidOption) {
		t.Fatalf("Open with a cap below minSessionTimeout = %v, want ErrInvalidOption", err)
	}
}

// A root whose record is gone or garbled while its identity node stays
// (someone overwrote the root's data): the new epoch replaces the old
// identity in the same multi, so no session of the old epoch renews or
// acquires on, with tokens of the old epoch, beside the new one.
func TestEpochReplacedEndsTheOldEpochsSessions(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root, zksimba.WithMaxLease(time.Second))
	sa := open(t, a, 2*time.Second)
	if _, err := rawConn(t, srv).Set(root, []byte("not a record"), -1); err != nil {
		t.Fatal(err)
	}
	b := newBackendNoInit(t, srv, root, zksimba.WithMaxLease(time.Second))
	open(t, b, 2*time.Second) // finds no valid record: a new epoch, in quarantine
	if _, err := a.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew of the old epoch's session after the epoch was replaced = %v, want ErrExpired", err)
	}
	children, _, err := rawConn(t, srv).Children(root + "/@epoch")
	if err != nil || len(children) != 1 {
		t.Fatalf("identity nodes after the replacement: %v, %v; want exactly one", children, err)
	}
}
