package redissimba_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// WithWaitReplicas: every grant and renewal the caller is told about is on
// the replica; a replica that does not acknowledge makes the call fail, so
// after a failover to it nothing the caller believed is missing.
func TestWaitReplicasCoversFailoverToStaleReplica(t *testing.T) {
	master := startServer(t, "--repl-diskless-sync-delay", "0")
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	mc := master.client(master.addr())
	if n, err := mc.(*redis.Client).Wait(ctxT(t), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 for the initial sync: %d replicas, %v", n, err)
	}
	ns := namespace(t)
	b := newBackend(t, mc, ns, redissimba.WithWaitReplicas(1, time.Second)) // generous: a loaded machine delays the ack
	rc := replica.client(replica.addr())
	id := open(t, b, 5*time.Second)
	tok := acquire(t, b, id, "x")[0]
	// Acknowledged: the replica has the grant the moment Acquire returns.
	if owner, err := rc.HGet(ctxT(t), "simba:{"+ns+"}:l:x", "s").Result(); err != nil || owner != string(id) {
		t.Fatalf("replica's owner of x right after the grant = %q, %v; want %s", owner, err, id)
	}
	renew(t, b, id, 0)

	replica.pause() // from here on the replica acknowledges nothing
	if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"y"}}); !errors.Is(err, redissimba.ErrReplicaLag) {
		t.Fatalf("Acquire while the replica lags = %v, want ErrReplicaLag", err)
	}
	if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id}); !errors.Is(err, redissimba.ErrReplicaLag) {
		t.Fatalf("Renew while the replica lags = %v, want ErrReplicaLag", err)
	}
	if _, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); !errors.Is(err, redissimba.ErrReplicaLag) {
		t.Fatalf("Open while the replica lags = %v, want ErrReplicaLag", err)
	}
	master.kill()
	replica.resume()
	if err := rc.(*redis.Client).ReplicaOf(ctxT(t), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	// The promoted replica has what the caller was told: x under tok, held
	// by the live session; another session cannot take it. (It may have
	// more: writes in flight when the replica was paused can still arrive,
	// such as the grant of y the caller was refused; the engine releases a
	// listed lease no term holds.)
	nb := newBackend(t, rc, ns)
	r := renew(t, nb, id, 0)
	if !slices.Contains(r.Leases, driver.Lease{Name: "x", Token: tok}) {
		t.Fatalf("after the failover the session owns %+v, want x under %d among them", r.Leases, tok)
	}
	if got := acquire(t, nb, open(t, nb, time.Second), "x")[0]; got != 0 {
		t.Fatalf("another session took x (token %d) after the failover: the grant the caller believed was lost", got)
	}
}

func TestWaitReplicasOptions(t *testing.T) {
	c := standalone(t)
	for _, bad := range []redissimba.Option{redissimba.WithWaitReplicas(-1, time.Second), redissimba.WithWaitReplicas(1, 0)} {
		if _, err := redissimba.New(c, "ns", bad); err == nil {
			t.Error("a bad WithWaitReplicas was accepted")
		}
	}
	// The shared servers have no replica: WAIT 1 gets none, on the
	// standalone server and on the Cluster node that serves the namespace.
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, namespace(t), redissimba.WithWaitReplicas(1, 50*time.Millisecond))
		if _, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); !errors.Is(err, redissimba.ErrReplicaLag) {
			t.Fatalf("Open with no replica = %v, want ErrReplicaLag", err)
		}
	})
}

// A grant the replica did not acknowledge stays unbelieved when the same
// session asks again on another connection. The first Acquire writes the
// grant and fails with ErrReplicaLag; the second finds x already the
// caller's and writes nothing. Its WAIT still waits for the grant only
// because Redis sets a connection's WAIT offset to the replication offset
// after every command, writing or not (not only "the writes of the
// connection", as WAIT is documented); a server doing only what the
// documentation says would acknowledge a grant the paused replica never
// had. This pins the behaviour WithWaitReplicas relies on.
func TestWaitReplicasAfterRefusedGrant(t *testing.T) {
	master := startServer(t, "--repl-diskless-sync-delay", "0")
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	mc := master.client(master.addr())
	if n, err := mc.(*redis.Client).Wait(ctxT(t), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 for the initial sync: %d replicas, %v", n, err)
	}
	b := newBackend(t, mc, namespace(t), redissimba.WithWaitReplicas(1, time.Second)) // generous: a loaded machine delays the ack
	id := open(t, b, 5*time.Second)

	replica.pause() // from here on the replica acknowledges nothing
	if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}}); !errors.Is(err, redissimba.ErrReplicaLag) {
		t.Fatalf("Acquire while the replica lags = %v, want ErrReplicaLag", err)
	}
	// The connection that carried the grant goes away (a network blip,
	// the server's idle timeout); the pool dials a new one.
	admin := redis.NewClient(&redis.Options{Addr: master.addr(), MaxRetries: -1})
	defer func() { _ = admin.Close() }()
	if err := admin.ClientKillByFilter(ctxT(t), "TYPE", "normal").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE normal: %v", err)
	}
	for range 2 {
		rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
		if errors.Is(err, redissimba.ErrReplicaLag) {
			return
		}
		if err != nil {
			continue // the killed connection, if the pool had not noticed
		}
		info, _ := admin.Info(ctxT(t), "replication").Result()
		t.Fatalf("Acquire of x on a new connection = %+v: reported without the paused replica's acknowledgement of the grant:\n%s", rep, info)
	}
	t.Fatal("Acquire kept failing after the connections were killed")
}
