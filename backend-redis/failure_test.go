package redissimba_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// callTimeout stands for the engine's renewal period: it bounds each call.
const callTimeout = 300 * time.Millisecond

// timed runs op under a callTimeout context and returns its error and how
// long it took.
func timed(op func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	err := op(ctx)
	return time.Since(start), err
}

func TestFailureRedisPaused(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.client(s.addr()), namespace(t))
	lease := 2 * time.Second
	id := open(t, b, lease)
	tok := acquire(t, b, id, "x")[0]

	s.pause()
	took, err := timed(func(ctx context.Context) error {
		_, err := b.Renew(ctx, driver.RenewRequest{ID: id})
		return err
	})
	if err == nil || took > callTimeout+200*time.Millisecond {
		t.Fatalf("Renew on a paused Redis: err %v after %v, want an error within %v", err, took, callTimeout)
	}
	took, err = timed(func(ctx context.Context) error {
		_, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"y"}})
		return err
	})
	if err == nil || took > callTimeout+200*time.Millisecond {
		t.Fatalf("Acquire on a paused Redis: err %v after %v, want an error within %v", err, took, callTimeout)
	}
	s.resume()
	// A pause shorter than the lease: the session is still alive at Redis
	// and still owns x under the same token.
	r := renew(t, b, id, 0)
	if len(r.Leases) != 1 || r.Leases[0].Token != tok {
		t.Fatalf("after a short pause: %+v, want x under token %d", r, tok)
	}

	// A pause longer than the lease: Redis's clock ran on, so the session
	// is gone when Redis wakes, and x is free for the next session.
	s.pause()
	waitTimer(lease + 200*time.Millisecond)
	s.resume()
	if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew after a pause longer than the lease = %v, want ErrExpired", err)
	}
	o := open(t, b, lease)
	if got := acquire(t, b, o, "x")[0]; got <= tok {
		t.Fatalf("token after the owner expired = %d, want > %d", got, tok)
	}
}

func TestFailureRedisRestartedEmpty(t *testing.T) {
	s := startServer(t)
	const maxLease = time.Second
	b := newBackend(t, s.client(s.addr()), namespace(t), redissimba.WithMaxLease(maxLease))
	id := open(t, b, 5*time.Second)
	var last uint64
	for i := 0; i < 5; i++ {
		last = acquire(t, b, id, "x")[0]
		release(t, b, id, "x", last)
	}
	last = acquire(t, b, id, "x")[0]

	s.restartEmpty()
	// The data loss shows as an expired session: the engine opens a new one.
	if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id}); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Renew after a restart without data = %v, want ErrExpired", err)
	}
	o := open(t, b, 5*time.Second)
	awaitQuarantine(t, b, o, maxLease, "x")
	tok := acquire(t, b, o, "x")[0]
	if tok <= last {
		t.Fatalf("token after the restart = %d, want > %d (tokens never go back)", tok, last)
	}

	// FLUSHALL is the same loss without a restart.
	if err := s.client(s.addr()).FlushAll(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	o2 := open(t, b, 5*time.Second)
	awaitQuarantine(t, b, o2, maxLease, "x")
	if tok2 := acquire(t, b, o2, "x")[0]; tok2 <= tok {
		t.Fatalf("token after FLUSHALL = %d, want > %d", tok2, tok)
	}
}

// TestFailureStaleReplicaState puts the namespace back to an earlier state,
// as a failover to a replica that missed the latest writes would: the lease
// record and its last token roll back, yet new tokens stay above every
// token handed out before.
func TestFailureStaleReplicaState(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns)
		id := open(t, b, 5*time.Second)
		first := acquire(t, b, id, "x")[0]
		key := "simba:{" + ns + "}:l:x"
		snapshot, err := c.Dump(ctxT(t), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		release(t, b, id, "x", first)
		for i := 0; i < 20; i++ {
			last = acquire(t, b, id, "x")[0]
			release(t, b, id, "x", last)
		}
		// Roll back: the old record (owned by id under the first token).
		if err := c.RestoreReplace(ctxT(t), key, 0, snapshot).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		o := open(t, b, 5*time.Second)
		if tok := acquire(t, b, o, "x")[0]; tok <= last {
			t.Fatalf("token after the rollback = %d, want > %d", tok, last)
		}
	})
}

func TestFailureConnectionCutAndRestored(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.addr())
	b := newBackend(t, s.client(p.addr()), namespace(t))
	lease := 3 * time.Second
	id := open(t, b, lease)
	tok := acquireWaited(t, b, id, "x")
	got := subscribe(t, b)

	p.setCut(true)
	took, err := timed(func(ctx context.Context) error {
		_, err := b.Renew(ctx, driver.RenewRequest{ID: id})
		return err
	})
	if err == nil || took > callTimeout+200*time.Millisecond {
		t.Fatalf("Renew while cut: err %v after %v, want an error within %v", err, took, callTimeout)
	}
	p.setCut(false)
	// Restored within the lease: the session goes on at Redis with its lease.
	r := renew(t, b, id, 0)
	if len(r.Leases) != 1 || r.Leases[0] != (driver.Lease{Name: "x", Token: tok}) {
		t.Fatalf("after the cut: %+v, want x under token %d", r, tok)
	}
	if r.Remaining <= lease-time.Second {
		t.Fatalf("Remaining after renewal = %v, want near %v", r.Remaining, lease)
	}
	// The subscription came back and said notices may have been lost.
	got.await(t, "with an empty name after the link came back", func(n driver.Notice) bool { return n.Name == "" })
	release(t, b, id, "x", tok)
	got.await(t, "for x after the link came back", func(n driver.Notice) bool { return n.Name == "x" })
}

// A session must not fail to start because Redis blinked: Subscribe on a
// paused Redis returns after the subscribe timeout, and the subscription
// arrives (as an empty notice) when Redis is back.
func TestFailureSubscribeWhileRedisPaused(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.client(s.addr()), namespace(t), redissimba.WithSubscribeTimeout(200*time.Millisecond))
	s.pause()
	start := time.Now()
	got := subscribe(t, b)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Subscribe on a paused Redis took %v, want about the 200ms subscribe timeout", took)
	}
	s.resume()
	got.await(t, "with an empty name once subscribed", func(n driver.Notice) bool { return n.Name == "" })
	id := open(t, b, 5*time.Second)
	release(t, b, id, "x", acquireWaited(t, b, id, "x"))
	got.await(t, "for x", func(n driver.Notice) bool { return n.Name == "x" })
}

// TestFailureFailoverToStaleReplica promotes a replica that missed the
// latest writes (it was paused while the master handed out more terms),
// as a Sentinel or Cluster failover after asynchronous replication would:
// tokens handed out by the new primary are still above every earlier one.
func TestFailureFailoverToStaleReplica(t *testing.T) {
	master := startServer(t, "--repl-diskless-sync-delay", "0")
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))

	mc := master.client(master.addr())
	// Wait until the replica has caught up (WAIT blocks until it
	// acknowledges), first for the initial sync, then for the term below.
	waitReplicas := func() {
		t.Helper()
		n, err := mc.(*redis.Client).Wait(ctxT(t), 1, 5*time.Second).Result()
		if err != nil || n != 1 {
			t.Fatalf("WAIT 1: %d replicas, %v", n, err)
		}
	}
	if err := mc.Set(ctxT(t), "sync-probe", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitReplicas()

	ns := namespace(t)
	b := newBackend(t, mc, ns)
	lease := time.Second
	id := open(t, b, lease)
	tok := acquire(t, b, id, "x")[0]
	waitReplicas()

	replica.pause() // from here on the replica misses every write
	var last uint64
	release(t, b, id, "x", tok)
	for i := 0; i < 10; i++ {
		last = acquire(t, b, id, "x")[0]
		release(t, b, id, "x", last)
	}
	master.kill()
	replica.resume()
	rc := replica.client(replica.addr())
	if err := rc.(*redis.Client).ReplicaOf(ctxT(t), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}

	// The promoted replica still has the first term: x owned by the old
	// session until that expires on the new primary's clock. Its epoch
	// names the old primary's run_id: the first Acquire quarantines the
	// namespace for one maximum lease (ADR 0131).
	nb := newBackend(t, rc, ns, redissimba.WithMaxLease(lease))
	o := open(t, nb, lease)
	awaitQuarantine(t, nb, o, lease, "x")
	passRenewing(t, nb, o, 200*time.Millisecond, lease)
	got := acquire(t, nb, o, "x")[0]
	if got <= last {
		t.Fatalf("token after failover to a stale replica = %d, want > %d (last token of the old primary)", got, last)
	}
}

// TestFailureRefusalWhileRedisRefusesWrites: a server over maxmemory with
// noeviction (the policy CheckServer asks for) refuses a script's first
// write, and a function's call whole (ADR 0148: it declares no flags). A
// refused Acquire wrote nothing before ADR 0147; its waited-for mark is
// now its only write, and must not turn "held by another session" into an
// OOM error (lock.TryAcquire would fail with a server error instead of
// ErrNotAcquired while the holder renews fine). The holder's renewal and
// release still run. The same with too few replicas for
// min-replicas-to-write (NOREPLICAS), where the holder cannot renew.
func TestFailureRefusalWhileRedisRefusesWrites(t *testing.T) {
	s := startServer(t, "--maxmemory-policy", "noeviction")
	c := s.client(s.addr())
	b := newBackend(t, c, namespace(t))
	a := open(t, b, 30*time.Second)
	tok := acquire(t, b, a, "x")[0]
	w := open(t, b, 30*time.Second)
	if err := c.ConfigSet(ctxT(t), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: w, Names: []string{"x"}})
	if err != nil || len(r.Results) != 1 || r.Results[0].Token != 0 || r.Results[0].Err != nil {
		t.Fatalf("Acquire of x, held by a live session, on a server over maxmemory = %+v, %v; want refused (token 0) without an error", r, err)
	}
	renew(t, b, a, 0)
	release(t, b, a, "x", tok)
	if err := c.ConfigSet(ctxT(t), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	acquire(t, b, a, "y")
	if err := c.ConfigSet(ctxT(t), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r, err = b.Acquire(ctxT(t), driver.AcquireRequest{ID: w, Names: []string{"y"}})
	if err != nil || len(r.Results) != 1 || r.Results[0].Token != 0 || r.Results[0].Err != nil {
		t.Fatalf("Acquire of y, held by a live session, on a server without the replicas min-replicas-to-write asks = %+v, %v; want refused (token 0) without an error", r, err)
	}
}
