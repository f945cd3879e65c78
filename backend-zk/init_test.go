package zksimba_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// grants acquires and releases name n times on a new session of b and
// returns the last token.
func grants(t *testing.T, b *zksimba.Backend, name string, n int) uint64 {
	t.Helper()
	s := open(t, b, 2*time.Second)
	var tok uint64
	for range n {
		tok = acquire(t, b, s.ID, name)[0].Token
		if tok == 0 {
			t.Fatalf("no token for %q", name)
		}
		must(t, b.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: s.ID, Leases: []driver.Lease{{Name: name, Token: tok}}}))
	}
	return tok
}

// wantInitUnsafe checks that Init on b is refused with ErrInitUnsafe and
// an error that says what to do.
func wantInitUnsafe(t *testing.T, b *zksimba.Backend, why string) error {
	t.Helper()
	err := b.Init(ctxT(t, 10*time.Second))
	if !errors.Is(err, driver.ErrInitUnsafe) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "ForceInit") {
		t.Fatalf("Init = %v; want ErrInitUnsafe saying %q and naming ForceInit", err, why)
	}
	return err
}

// wipe kills srv, deletes its data directory's contents and starts it
// again: the ensemble rebuilt from empty disks.
func wipe(t *testing.T, srv *zkServer) {
	t.Helper()
	srv.kill()
	must(t, os.RemoveAll(filepath.Join(srv.dir, "data", "version-2")))
	srv.restart()
	srv.waitServing(60 * time.Second)
}

// Issue 26: a server's data directory wiped and the server restarted;
// another process runs Init and acquires. Before, its token was lower
// than one already handed out (the Init epoch started at its creation
// second, the lost one had started in the same second, and the low part
// restarted with the zxids), and no quarantine protected an old holder.
// Now Init is refused while the ensemble holds no node older than
// MaxLease (it leaves nothing behind: the first use is quarantined);
// it is accepted once the ensemble is older; ForceInit skips the check
// but not the token rule.
func TestInitAfterWipedDataDir(t *testing.T) {
	srv := startZK(t, 1)[0]
	addr := []string{srv.addr()}
	const maxLease = 2 * time.Second
	opt := zksimba.WithMaxLease(maxLease)
	root := newRoot(t)

	// A server just started: nothing shows it did not just lose its data.
	a := newBackendNoInit(t, addr, root, opt)
	wantInitUnsafe(t, a, "no node older than MaxLease")
	if ok, _, err := rawConn(t, addr).Exists(root); err != nil || ok {
		t.Fatalf("a refused Init left the root behind: %v, %v", ok, err)
	}
	must(t, a.ForceInit(ctxT(t, 10*time.Second)))
	high := grants(t, a, "jobs", 20)

	// Once the ensemble holds a node older than MaxLease, Init is accepted,
	// and the first Acquire right after it is granted.
	start := time.Now()
	var fresh *zksimba.Backend
	waitUntil(t, 4*maxLease, "Init accepted on an ensemble older than MaxLease", func() bool {
		fresh = newBackendNoInit(t, addr, newRoot(t), opt)
		err := fresh.Init(ctxT(t, 10*time.Second))
		if errors.Is(err, driver.ErrInitUnsafe) {
			return false
		}
		must(t, err)
		return true
	})
	s := open(t, fresh, 2*time.Second)
	if r, err := fresh.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s.ID, Names: []string{"x"}}); err != nil || r.Quarantine != 0 || r.Results[0].Token == 0 {
		t.Fatalf("first Acquire after an accepted Init = %+v, %v; want a token at once", r, err)
	}
	t.Logf("Init accepted %v after the first node (MaxLease %v)", time.Since(start), maxLease)

	wipe(t, srv)
	b := newBackendNoInit(t, addr, root, opt) // another process
	wantInitUnsafe(t, b, "no node older than MaxLease")
	first, tok := quarantined(t, b, "jobs", 3*maxLease)
	if first <= 0 {
		t.Fatal("the first use after a refused Init was not quarantined")
	}
	if tok <= high {
		t.Fatalf("token after the wipe %d, want > %d: tokens never go backwards", tok, high)
	}

	// ForceInit after another wipe: no quarantine, still a higher token.
	wipe(t, srv)
	c := newBackendNoInit(t, addr, root, opt)
	must(t, c.ForceInit(ctxT(t, 10*time.Second)))
	sc := open(t, c, 2*time.Second)
	if got := acquire(t, c, sc.ID, "jobs")[0].Token; got <= tok {
		t.Fatalf("token after ForceInit on the wiped server %d, want > %d", got, tok)
	}
}

// Init's young-ensemble check is sized like the quarantine it spares, by
// MaxLease + MaxLockDelay (ADR 0246): a holder paused across a loss is
// covered for its lease and a delay its term asked for. An ensemble whose
// oldest node is older than MaxLease but younger than that sum is refused
// for a backend with a lock-delay, accepted for one without.
func TestInitSizedByMaxLeasePlusMaxLockDelay(t *testing.T) {
	srv := startZK(t, 1)[0]
	addr := []string{srv.addr()}
	const maxLease = time.Second
	plain := []zksimba.Option{zksimba.WithMaxLease(maxLease)}
	delayed := []zksimba.Option{zksimba.WithMaxLease(maxLease), zksimba.WithMaxLockDelay(time.Hour)}
	waitUntil(t, 8*maxLease, "Init accepted on an ensemble older than MaxLease (no lock-delay)", func() bool {
		err := newBackendNoInit(t, addr, newRoot(t), plain...).Init(ctxT(t, 10*time.Second))
		if errors.Is(err, driver.ErrInitUnsafe) {
			return false
		}
		must(t, err)
		return true
	})
	// The ensemble now holds a node older than MaxLease (the first Init's
	// root), but none older than MaxLease + one hour.
	err := wantInitUnsafe(t, newBackendNoInit(t, addr, newRoot(t), delayed...), "no node older than MaxLease + MaxLockDelay")
	if !strings.Contains(err.Error(), (maxLease + time.Hour).String()) {
		t.Fatalf("Init refused with %v; want the age it looked for, %v", err, maxLease+time.Hour)
	}
}

// The same rule without a restart: a namespace deleted (deleteall, which
// Init cannot see) and initialised again within the second its lost epoch
// began. Its tokens must still be above the lost epoch's.
func TestInitTokensAboveAnEpochLostInTheSameSecond(t *testing.T) {
	srv := standalone(t)
	raw := rawConn(t, srv)
	for try := range 3 {
		root := newRoot(t)
		a := newBackend(t, srv, root) // an Init epoch as before ADR 0179
		high := grants(t, a, "x", 20)
		deleteAll(t, raw, root)
		b := newBackendNoInit(t, srv, root)
		must(t, b.ForceInit(ctxT(t, 10*time.Second)))
		s := open(t, b, 2*time.Second)
		if got := acquire(t, b, s.ID, "x")[0].Token; got <= high {
			t.Fatalf("try %d: token after the namespace was deleted and initialised again %d (%#x), want > %d (%#x)", try, got, got, high, high)
		}
	}
}

// A root whose epoch is gone but whose records are not (its record
// overwritten, lease nodes and the epoch directory still there): Init is
// refused naming them; ForceInit replaces the epoch, whose old sessions
// end, with higher tokens.
func TestInitRefusesRecordsOfAnotherEpoch(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 2*time.Second)
	keepAlive(t, a, sa.ID, 300*time.Millisecond)
	before := acquire(t, a, sa.ID, "x")[0].Token
	if _, err := rawConn(t, srv).Set(root, []byte("overwritten"), -1); err != nil {
		t.Fatal(err)
	}
	b := newBackendNoInit(t, srv, root)
	wantInitUnsafe(t, b, "records of an epoch that is gone")
	must(t, b.ForceInit(ctxT(t, 10*time.Second)))
	if _, err := a.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: sa.ID}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("the old epoch's session renewed after ForceInit: %v", err)
	}
	// The old session's lease node goes with it; then the name is free.
	sb := open(t, b, 2*time.Second)
	var got uint64
	waitUntil(t, 10*time.Second, "x granted in the new epoch", func() bool {
		r := acquire(t, b, sb.ID, "x")
		got = r[0].Token
		return got != 0
	})
	if got <= before {
		t.Fatalf("token in the forced epoch %d, want > %d", got, before)
	}
}

// Every replica of an application runs Init at its start, at once: each
// Init returns with the namespace usable: its process's first Acquire
// is granted, or at worst answers the rest of the Init epoch's first
// second. Before ADR 0224 every Init but the first returned at once,
// while the first one's quarantined epoch (made before its age check)
// could stand: their Acquire answered a quarantine of MaxLease (3 of 4 in
// one run).
func TestConcurrentInitsEachLeaveAUsableNamespace(t *testing.T) {
	srv, root := standalone(t), newRoot(t) // the shared server: older than MaxLease
	const n = 4
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		b := newBackendNoInit(t, srv, root)
		go func() {
			if err := b.Init(ctxT(t, 20*time.Second)); err != nil {
				errs <- fmt.Errorf("Init: %w", err)
				return
			}
			s, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: 4 * time.Second})
			if err != nil {
				errs <- fmt.Errorf("Open: %w", err)
				return
			}
			r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s.ID, Names: []string{fmt.Sprintf("n%d", i)}})
			switch {
			case err != nil:
				errs <- fmt.Errorf("Acquire right after Init: %w", err)
			case r.Quarantine >= time.Second || r.Quarantine == 0 && r.Results[0].Token == 0:
				// Under a second: the first token second of an Init
				// epoch that this Init found made already (ADR 0224).
				errs <- fmt.Errorf("Acquire right after Init: not granted, quarantine %v", r.Quarantine)
			default:
				errs <- nil
			}
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// An Init that finds another Init halfway (its pending epoch, here left
// as a slow Init would leave it) waits for that one's outcome: here the
// other refuses and removes its epoch, and this Init then makes its own.
// Taking the pending epoch for a first use's quarantine would return at
// once, and the first Acquire would wait MaxLease.
func TestInitWaitsForAnotherInitHalfway(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	b := newBackendNoInit(t, srv, root)
	must(t, zksimba.CreatePendingInitForTest(ctxT(t, 10*time.Second), b))
	done := make(chan error, 1)
	go func() { done <- b.Init(ctxT(t, 20*time.Second)) }()
	select {
	case err := <-done:
		t.Fatalf("Init returned (%v) while another Init's pending epoch stood", err)
	case <-time.After(300 * time.Millisecond):
	}
	raw, _, err := zk.Connect(srv, 10*time.Second, zk.WithLogInfo(false))
	must(t, err)
	defer raw.Close()
	deleteAll(t, raw, root)
	must(t, <-done)
	s := open(t, b, 4*time.Second)
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s.ID, Names: []string{"x"}})
	must(t, err)
	if r.Quarantine > 0 || r.Results[0].Token == 0 {
		t.Fatalf("Acquire after Init: not granted, quarantine %v", r.Quarantine)
	}
}

// An Init that died halfway (its connection lost after its first epoch)
// leaves its pending mark. The next Init waits for it at most
// maxInitAwait and clears it, so no later Init waits again: a deploy job
// that runs Init every time pays that once. The namespace stays in the
// quarantine of that epoch, as a first use would have started it.
func TestInitClearsTheMarkOfAnInitThatDied(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	b := newBackendNoInit(t, srv, root)
	must(t, zksimba.CreatePendingInitForTest(ctxT(t, 10*time.Second), b))
	start := time.Now()
	must(t, b.Init(ctxT(t, 20*time.Second)))
	first := time.Since(start)
	start = time.Now()
	must(t, b.Init(ctxT(t, 20*time.Second)))
	if again := time.Since(start); again > time.Second {
		t.Fatalf("the Init after the one that waited %v took %v: the dead Init's mark was not cleared", first, again)
	}
	s := open(t, b, 4*time.Second)
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: s.ID, Names: []string{"x"}})
	must(t, err)
	if r.Quarantine == 0 {
		t.Fatalf("Acquire granted %d: the dead Init's quarantined epoch ended early", r.Results[0].Token)
	}
}
