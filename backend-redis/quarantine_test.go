package redissimba_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// The quarantine after data loss (ADR 0130, Redis specifics in ADR 0131).

// awaitQuarantine checks that an Acquire of names by id is quarantined
// for at most maxLease, with every token 0 and no error, and waits it out.
func awaitQuarantine(t *testing.T, b *redissimba.Backend, id driver.ID, maxLease time.Duration, names ...string) time.Duration {
	t.Helper()
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: names})
	if err != nil {
		t.Fatalf("Acquire during the quarantine: %v", err)
	}
	if r.Quarantine <= 0 || r.Quarantine > maxLease {
		t.Fatalf("Acquire after the loss: Quarantine = %v, want in (0, %v]", r.Quarantine, maxLease)
	}
	for _, res := range r.Results {
		if res.Token != 0 || res.Err != nil {
			t.Fatalf("Acquire during the quarantine granted %+v", res)
		}
	}
	passRenewing(t, b, id, r.Quarantine+50*time.Millisecond, maxLease)
	return r.Quarantine
}

// passRenewing waits d of real time (the quarantine runs on the Redis
// clock: there is no event to wait on), renewing id every quarter of its
// lease so that it outlives the wait.
func passRenewing(t *testing.T, b *redissimba.Backend, id driver.ID, d, lease time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		waitTimer(min(lease/4, time.Until(end)))
		renew(t, b, id, 0)
	}
}

// loseNamespace deletes every key of namespace ns: a FLUSHALL limited to
// the test's own keys, so other users of the shared servers keep theirs.
func loseNamespace(t *testing.T, c redis.UniversalClient, ns string) {
	t.Helper()
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, "simba:{"+ns+"}:*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctxT(t), del)
	case *redis.Client:
		err = del(ctxT(t), c)
	}
	if err != nil {
		t.Fatalf("losing namespace %s: %v", ns, err)
	}
}

func TestQuarantineAfterDataLoss(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		const maxLease = time.Second
		ns := namespace(t)
		b := newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
		a := open(t, b, maxLease)
		tx := acquire(t, b, a, "x")[0]

		loseNamespace(t, c, ns)
		lost := time.Now()
		if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: a}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("Renew of a session whose record was lost = %v, want ErrExpired", err)
		}
		if _, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: a, Names: []string{"x"}}); !errors.Is(err, driver.ErrExpired) {
			t.Fatalf("Acquire by a session whose record was lost = %v, want ErrExpired", err)
		}
		o := open(t, b, maxLease) // Open works during the quarantine
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x", "y"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Quarantine <= maxLease-time.Since(lost) || r.Quarantine > maxLease {
			t.Fatalf("first Acquire after the loss: Quarantine = %v, want one maximum lease (%v) from the detection", r.Quarantine, maxLease)
		}
		for _, res := range r.Results {
			if res.Token != 0 || res.Err != nil {
				t.Fatalf("granted during the quarantine: %+v", res)
			}
		}
		// Another process sees the same quarantine, counting down, not
		// restarted.
		other := newUninitialised(t, c, ns, redissimba.WithMaxLease(maxLease))
		oo := open(t, other, maxLease)
		passRenewing(t, b, o, maxLease/4, maxLease)
		q := awaitQuarantine(t, other, oo, maxLease, "x")
		renew(t, b, o, 0)
		if q > r.Quarantine-maxLease/4 {
			t.Fatalf("Quarantine %v after %v, want ≤ %v: the quarantine counts down", q, maxLease/4, r.Quarantine-maxLease/4)
		}
		if tok := acquire(t, b, o, "x")[0]; tok <= tx {
			t.Fatalf("token after the quarantine = %d, want > %d (tokens never go back)", tok, tx)
		}
		if tok := acquire(t, other, oo, "y")[0]; tok == 0 {
			t.Fatal("y not granted after the quarantine")
		}
	})
}

// A namespace nobody initialised cannot be told from a lost one: its first
// Acquire is quarantined. Init during the quarantine does not end it.
func TestUninitialisedNamespaceQuarantined(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		const maxLease = 500 * time.Millisecond
		ns := namespace(t)
		b := newUninitialised(t, c, ns, redissimba.WithMaxLease(maxLease))
		id := open(t, b, maxLease)
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
		if err != nil || r.Quarantine <= 0 || r.Results[0].Token != 0 {
			t.Fatalf("first Acquire on an uninitialised namespace = %+v, %v; want a quarantine", r, err)
		}
		if err := b.Init(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		awaitQuarantine(t, b, id, maxLease, "x")
		if tok := acquire(t, b, id, "x")[0]; tok == 0 {
			t.Fatal("x not granted after the quarantine")
		}
		if err := b.Init(ctxT(t)); err != nil { // a second Init is harmless
			t.Fatal(err)
		}
		if tok := acquire(t, b, open(t, b, maxLease), "y")[0]; tok == 0 {
			t.Fatal("y not granted after a second Init")
		}
	})
}

// ForceInit after a loss that no Acquire noticed disables that quarantine:
// the reason its documentation says to call it only when no holder can
// still believe in a term.
func TestForceInitAfterLossSkipsQuarantine(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	acquire(t, b, open(t, b, time.Second), "x")
	loseNamespace(t, c, ns)
	if err := b.ForceInit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if tok := acquire(t, b, open(t, b, time.Second), "x")[0]; tok == 0 {
		t.Fatal("x not granted at once after Init")
	}
}

// A garbled epoch is treated as a lost one: a quarantine, never a grant.
func TestGarbledEpochQuarantines(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(300*time.Millisecond))
	if err := c.Set(ctxT(t), "simba:{"+ns+"}:epoch", "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	id := open(t, b, time.Second)
	awaitQuarantine(t, b, id, 300*time.Millisecond, "x")
	if tok := acquire(t, b, id, "x")[0]; tok == 0 {
		t.Fatal("x not granted after the quarantine")
	}
}

// WithMaxLease caps every grant: Open, and Renew of a session opened with
// a longer lease by a backend with a larger cap.
func TestMaxLeaseCapsGrants(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		const maxLease = time.Second
		ns := namespace(t)
		b := newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
		o, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if o.Remaining <= 0 || o.Remaining > maxLease {
			t.Fatalf("Open(5s) with WithMaxLease(%v): Remaining %v", maxLease, o.Remaining)
		}
		if r := renew(t, b, o.ID, 0); r.Remaining > maxLease {
			t.Fatalf("Renew: Remaining %v > %v", r.Remaining, maxLease)
		}
		wide := newBackend(t, c, ns) // DefaultMaxLease
		long := open(t, wide, 5*time.Second)
		if r := renew(t, wide, long, 0); r.Remaining <= maxLease {
			t.Fatalf("Renew under the default cap: Remaining %v, want above %v", r.Remaining, maxLease)
		}
		if r := renew(t, b, long, 0); r.Remaining > maxLease {
			t.Fatalf("Renew under WithMaxLease(%v) of a 5s session: Remaining %v", maxLease, r.Remaining)
		}
		if _, err := redissimba.New(c, ns, redissimba.WithMaxLease(-time.Second)); err == nil {
			t.Fatal("WithMaxLease(-1s) accepted")
		}
	})
}

// A crash of a Redis persisting by RDB snapshots alone restarts from the
// last snapshot: the epoch key is there, the lease granted since is not.
// The epoch's run_id names the process that wrote it, so the restarted
// process (another run_id) quarantines the namespace instead of handing the
// lease to another session while its holder still believes in it.
func TestRestartFromSnapshotQuarantines(t *testing.T) {
	s := startServer(t)
	const maxLease = time.Second
	c := s.client(s.addr())
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
	a := open(t, b, maxLease)
	// An acquire before the snapshot: the acquire function's library, with
	// this process's run_id cached in it (ADR 0148), is in the snapshot
	// too, and comes back as code in the restarted process.
	release(t, b, a, "warm", acquire(t, b, a, "warm")[0])
	if err := c.Save(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	tx := acquire(t, b, a, "x")[0]
	known := renew(t, b, a, 0).Version

	s.restartFromSnapshot()
	if libs := acquireLibraries(t, s.client(s.addr())); libs == 0 {
		t.Fatal("the acquire function's library did not come back from the snapshot")
	}
	other := newUninitialised(t, s.client(s.addr()), ns, redissimba.WithMaxLease(maxLease))
	o := open(t, other, maxLease)
	r, err := other.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Results[0].Token != 0 {
		t.Fatalf("another session took x (token %d) at once after a restart from a snapshot older than A's grant (token %d): two holders", r.Results[0].Token, tx)
	}
	if r.Quarantine <= 0 || r.Quarantine > maxLease {
		t.Fatalf("first Acquire after the restart: Quarantine = %v, want in (0, %v]", r.Quarantine, maxLease)
	}
	// A's session came back from the snapshot without x: its next renewal
	// says so (another version, x not listed), so A's term ends there.
	if got := renew(t, b, a, known); got.Version == known || len(got.Leases) != 0 {
		t.Fatalf("A's renewal after the restart: %+v, want a new version and no lease (x was granted after the snapshot)", got)
	}
	awaitQuarantine(t, other, o, maxLease, "x")
	if tok := acquire(t, other, o, "x")[0]; tok <= tx {
		t.Fatalf("token after the quarantine = %d, want > %d", tok, tx)
	}
	// The quarantine recorded the new run_id: no second one.
	if tok := acquire(t, b, open(t, b, maxLease), "y")[0]; tok == 0 {
		t.Fatal("y not granted after the quarantine: a second quarantine for the same restart")
	}
}

// WithoutRestartQuarantine does what its doc warns about: the same restart
// from a snapshot goes unnoticed and x is granted at once. It is for
// servers that cannot restart older (appendfsync always).
func TestWithoutRestartQuarantineTrustsTheRestart(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithoutRestartQuarantine())
	a := open(t, b, 5*time.Second)
	if err := c.Save(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	acquire(t, b, a, "x")
	s.restartFromSnapshot()
	other := newUninitialised(t, s.client(s.addr()), ns, redissimba.WithoutRestartQuarantine())
	if tok := acquire(t, other, open(t, other, 5*time.Second), "x")[0]; tok == 0 {
		t.Fatal("x not granted at once with WithoutRestartQuarantine")
	}
	// A backend that checks still quarantines: the epoch names the old
	// process.
	checking := newUninitialised(t, s.client(s.addr()), ns, redissimba.WithMaxLease(300*time.Millisecond))
	id := open(t, checking, time.Second)
	awaitQuarantine(t, checking, id, 300*time.Millisecond, "y")
}

// A Cluster reshard that moves the namespace's slot to another master
// (MIGRATE carries the epoch key with the old node's run_id) is a change of
// incarnation: the new node quarantines the namespace. The same holds for
// a failover to a replica (TestFailureFailoverToStaleReplica).
func TestClusterSlotMoveQuarantines(t *testing.T) {
	c := cluster(t)
	const maxLease = time.Second
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
	a := open(t, b, maxLease)
	tx := acquire(t, b, a, "x")[0]
	m := startMigration(t, "simba:{"+ns+"}:epoch")
	m.finish()
	o := open(t, b, maxLease)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"y"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Results[0].Token != 0 || r.Quarantine <= 0 || r.Quarantine > maxLease {
		t.Fatalf("first Acquire after the slot moved: %+v, want a quarantine in (0, %v]", r, maxLease)
	}
	// The lease moved whole: x is still A's.
	if got := renew(t, b, a, 0); len(got.Leases) != 1 || got.Leases[0].Token != tx {
		t.Fatalf("A after the move: %+v, want x under token %d", got, tx)
	}
	awaitQuarantine(t, b, o, maxLease, "y")
	if tok := acquire(t, b, o, "y")[0]; tok == 0 {
		t.Fatal("y not granted after the quarantine")
	}
}

// The quarantine says what started it and, for a namespace that looks
// new, what to do (issue 22.8): the backend's hint reaches the engine's
// error. The wait itself stays: a new namespace and a lost one look the
// same.
func TestQuarantineHintSaysWhatToDo(t *testing.T) {
	c := standalone(t)
	const maxLease = 300 * time.Millisecond
	hint := func(b *redissimba.Backend) string {
		t.Helper()
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: open(t, b, time.Second), Names: []string{"x"}})
		if err != nil || r.Quarantine <= 0 {
			t.Fatalf("Acquire = %+v, %v; want a quarantine", r, err)
		}
		return r.QuarantineHint
	}
	ns := namespace(t)
	b := newUninitialised(t, c, ns, redissimba.WithMaxLease(maxLease))
	if h := hint(b); !strings.Contains(h, "either it is new or it lost its records") || !strings.Contains(h, "run Init once") || !strings.Contains(h, "simba --backend URL init") {
		t.Fatalf("hint of a new namespace's quarantine = %q, want it to say a new namespace runs Init", h)
	}
	// A namespace with a history: its epoch alone gone.
	ns = namespace(t)
	b = newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
	acquire(t, b, open(t, b, time.Second), "x")
	if err := c.Del(ctxT(t), "simba:{"+ns+"}:epoch").Err(); err != nil {
		t.Fatal(err)
	}
	if h := hint(b); !strings.Contains(h, "lost records") || strings.Contains(h, "run Init") {
		t.Fatalf("hint after the epoch alone was lost = %q, want a loss, not Init", h)
	}
	// Another history.
	ns = namespace(t)
	b = newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
	if err := c.Set(ctxT(t), "simba:{"+ns+"}:lineage", strings.Repeat("0f", 20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if h := hint(b); !strings.Contains(h, "replication history changed") {
		t.Fatalf("hint after the history changed = %q", h)
	}
	// A running quarantine keeps the hint it started with.
	if h := hint(b); !strings.Contains(h, "replication history changed") {
		t.Fatalf("hint during the same quarantine = %q", h)
	}
}

// The engine carries the hint into the quarantine's event and refusals.
func TestEngineQuarantineSaysRunInit(t *testing.T) {
	c := standalone(t)
	cfg := deadline.Config{LeaseDuration: time.Second, RenewInterval: 300 * time.Millisecond}
	b := newUninitialised(t, c, namespace(t), redissimba.WithMaxLease(time.Second))
	_, _, ev := startEngine(t, b, cfg, "x")
	for end := time.After(5 * time.Second); ; {
		select {
		case e := <-ev:
			if e.Kind != session.BackendQuarantined {
				continue
			}
			if !errors.Is(e.Err, session.ErrQuarantined) || !strings.Contains(e.Err.Error(), "no lease for") || !strings.Contains(e.Err.Error(), "run Init once") {
				t.Fatalf("BackendQuarantined on a new namespace: %v, want the wait and what to do", e.Err)
			}
			return
		case <-end:
			t.Fatal("no BackendQuarantined event within 5s")
		}
	}
}
