package redissimba_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Lock-delay (ADR 0246): a term granted with a delay whose session ends
// without a release or a close leaves its name refused for the delay,
// counted on the Redis clock from the first candidate that finds the
// owner's session gone.

// scriptOnly returns a client of a private server that refuses functions
// to it (an ACL, as Redis before 7 answers "unknown command"), so the
// backend runs the acquire script instead of the function.
func scriptOnly(t *testing.T) redis.UniversalClient {
	t.Helper()
	s := startServer(t)
	admin := s.client(s.addr())
	if err := admin.Do(ctxT(t), "ACL", "SETUSER", "nofn", "on", "nopass",
		"~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "nofn", Password: "any", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// forPaths runs body on the function path (the shared servers,
// standalone and Cluster) and on the script path.
func forPaths(t *testing.T, body func(t *testing.T, c redis.UniversalClient)) {
	forModes(t, body)
	t.Run("script", func(t *testing.T) { body(t, scriptOnly(t)) })
}

const (
	delayLease = 200 * time.Millisecond
	lockDelay  = time.Second
)

func acquireDelayed(t *testing.T, b *redissimba.Backend, id driver.ID, d time.Duration, name string) uint64 {
	t.Helper()
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{name}, LockDelay: d})
	if err != nil || len(r.Results) != 1 || r.Results[0].Err != nil {
		t.Fatalf("Acquire(%s, delay %v) = %+v, %v", name, d, r, err)
	}
	return r.Results[0].Token
}

func TestLockDelayAfterExpiry(t *testing.T) {
	forPaths(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns, redissimba.WithMaxLockDelay(2*lockDelay))
		a := open(t, b, delayLease)
		ta := acquireDelayed(t, b, a, lockDelay, "x")
		if ta == 0 {
			t.Fatal("x not granted")
		}
		// Another name of the same session, without a delay: free at expiry.
		tz := acquire(t, b, a, "z")[0]
		waitTimer(delayLease + 100*time.Millisecond)
		w := open(t, b, 10*time.Second)
		first := time.Now()
		if tok := acquire(t, b, w, "x")[0]; tok != 0 {
			t.Fatalf("x granted (%d) right after its owner expired: the lock-delay was not kept", tok)
		}
		if tok := acquire(t, b, w, "z")[0]; tok <= tz {
			t.Fatalf("z (no delay) after its owner expired = %d, want > %d", tok, tz)
		}
		var tw uint64
		for tw == 0 {
			if time.Since(first) > 5*lockDelay {
				t.Fatalf("x still refused %v after the first candidate found its owner gone", time.Since(first))
			}
			waitTimer(20 * time.Millisecond)
			tw = acquire(t, b, w, "x")[0]
		}
		if got := time.Since(first); got < lockDelay {
			t.Fatalf("x granted %v after the first candidate found its owner gone, want ≥ %v", got, lockDelay)
		}
		if tw <= ta {
			t.Fatalf("x after the delay = %d, want > %d", tw, ta)
		}
		// The new term has no delay: its record carries none.
		if n, err := c.HExists(ctxT(t), "simba:{"+ns+"}:l:x", "d").Result(); err != nil || n {
			t.Fatalf("x's record after a grant without a delay still has d: %v, %v", n, err)
		}
	})
}

// TestLockDelaySkippedOnReleaseAndClose: a voluntary end frees the name at once.
func TestLockDelaySkippedOnReleaseAndClose(t *testing.T) {
	forPaths(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t), redissimba.WithMaxLockDelay(2*lockDelay))
		a := open(t, b, 10*time.Second)
		release(t, b, a, "x", acquireDelayed(t, b, a, lockDelay, "x"))
		w := open(t, b, 10*time.Second)
		if tok := acquire(t, b, w, "x")[0]; tok == 0 {
			t.Fatal("x refused right after its delayed term was released")
		}
		acquireDelayed(t, b, a, lockDelay, "y")
		if err := b.Close(ctxT(t), a); err != nil {
			t.Fatal(err)
		}
		if tok := acquire(t, b, w, "y")[0]; tok == 0 {
			t.Fatal("y refused right after its delayed term's session closed")
		}
	})
}

// TestLockDelayRefusedAboveMax: a delay above WithMaxLockDelay, or
// negative, refuses the whole request and writes nothing.
func TestLockDelayRefusedAboveMax(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLockDelay(lockDelay))
	a := open(t, b, 10*time.Second)
	for _, d := range []time.Duration{lockDelay + time.Millisecond, -time.Millisecond} {
		_, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: a, Names: []string{"x"}, LockDelay: d})
		if !errors.Is(err, driver.ErrLockDelay) {
			t.Fatalf("Acquire with lock-delay %v (max %v) = %v, want ErrLockDelay", d, lockDelay, err)
		}
	}
	if n, err := c.Exists(ctxT(t), "simba:{"+ns+"}:l:x").Result(); err != nil || n != 0 {
		t.Fatalf("a refused request wrote x: %d, %v", n, err)
	}
	d := newBackend(t, c, namespace(t)) // the default maximum, 0
	_, err := d.Acquire(ctxT(t), driver.AcquireRequest{ID: open(t, d, time.Second), Names: []string{"x"}, LockDelay: time.Millisecond})
	if !errors.Is(err, driver.ErrLockDelay) {
		t.Fatalf("Acquire with a lock-delay on a backend without WithMaxLockDelay = %v, want ErrLockDelay", err)
	}
	if _, err := redissimba.New(c, namespace(t), redissimba.WithMaxLockDelay(-time.Second)); err == nil {
		t.Fatal("New accepted WithMaxLockDelay(-1s)")
	}
}

// TestQuarantineCoversTheMaximumLockDelay: a loss quarantines for the
// maximum lease plus the maximum lock-delay.
func TestQuarantineCoversTheMaximumLockDelay(t *testing.T) {
	forPaths(t, func(t *testing.T, c redis.UniversalClient) {
		maxLease := time.Second
		b := newUninitialised(t, c, namespace(t), redissimba.WithMaxLease(maxLease), redissimba.WithMaxLockDelay(3*time.Second))
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: open(t, b, maxLease), Names: []string{"x"}})
		if err != nil || r.Quarantine <= maxLease+2*time.Second || r.Quarantine > maxLease+3*time.Second {
			t.Fatalf("first Acquire of an uninitialised namespace = %+v, %v; want a quarantine of about 4s (1s lease + 3s lock-delay)", r, err)
		}
	})
}

// TestLockDelayRecordSweptAfterTheDelay: the sweep starts a delay it finds
// first, keeps the record while it runs and deletes it after.
func TestLockDelayRecordSweptAfterTheDelay(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLockDelay(2*lockDelay))
	a := open(t, b, delayLease)
	acquireDelayed(t, b, a, lockDelay, "x")
	waitTimer(delayLease + 100*time.Millisecond)
	first := time.Now()
	if n, err := b.Sweep(ctxT(t), 10); err != nil || n != 0 {
		t.Fatalf("Sweep right after the owner expired = %d, %v; want the record kept (its delay starts)", n, err)
	}
	if e, err := c.HExists(ctxT(t), "simba:{"+ns+"}:l:x", "e").Result(); err != nil || !e {
		t.Fatalf("the sweep that found x's owner gone did not start the delay: %v, %v", e, err)
	}
	if n, err := b.Sweep(ctxT(t), 10); err != nil || (n != 0 && time.Since(first) < lockDelay) {
		t.Fatalf("Sweep inside the delay = %d, %v; want the record kept", n, err)
	}
	w := open(t, b, 10*time.Second)
	if tok := acquire(t, b, w, "x")[0]; tok != 0 && time.Since(first) < lockDelay {
		t.Fatalf("x granted (%d) inside the delay the sweep started", tok)
	}
	waitTimer(lockDelay - time.Since(first) + 50*time.Millisecond)
	if n, err := b.Sweep(ctxT(t), 10); err != nil || n != 1 {
		t.Fatalf("Sweep after the delay = %d, %v; want x's record deleted", n, err)
	}
	wantBaseline(t, c, ns, w)
}

// TestLateReleaseKeepsTheDelay: a holder that wakes after its session
// expired on the server (a pause longer than the lease) and releases its
// lease must not free the name inside the delay: the release comes from a
// session the server already ended, the very case the delay is for.
func TestLateReleaseKeepsTheDelay(t *testing.T) {
	forPaths(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns, redissimba.WithMaxLockDelay(2*lockDelay))
		a := open(t, b, delayLease)
		ta := acquireDelayed(t, b, a, lockDelay, "x")
		tz := acquire(t, b, a, "z")[0] // no delay: a late release frees it
		if ta == 0 || tz == 0 {
			t.Fatal("x or z not granted")
		}
		waitTimer(delayLease + 100*time.Millisecond)
		release(t, b, a, "x", ta)
		release(t, b, a, "z", tz)
		w := open(t, b, 10*time.Second)
		if tok := acquire(t, b, w, "x")[0]; tok != 0 {
			t.Fatalf("x granted (%d) after its expired owner's late release: the lock-delay was skipped", tok)
		}
		if tok := acquire(t, b, w, "z")[0]; tok <= tz {
			t.Fatalf("z (no delay) after its owner's late release = %d, want > %d", tok, tz)
		}
	})
}
