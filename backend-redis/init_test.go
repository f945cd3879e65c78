package redissimba_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Init never undoes the quarantine it exists to avoid (issue 26, ADR
// 0165): where the server shows a sign that the namespace's records may
// have been lost within one maximum lease it refuses, writing nothing, and
// the first Acquire quarantines; tokens never go down.

const initLease = time.Second // the maximum lease of these tests

// upFor waits until the server has been up for more than d (INFO
// uptime_in_seconds, whole seconds that may run up to one ahead).
func upFor(t *testing.T, c redis.UniversalClient, d time.Duration) {
	t.Helper()
	pollUntil(t, d+5*time.Second, "server up for "+d.String(), func() bool {
		up, err := strconv.Atoi(infoField(c, "server", "uptime_in_seconds"))
		return err == nil && time.Duration(up)*time.Second > d
	})
}

// initRefused asserts that Init refuses with ErrInitUnsafe, a message
// containing sign and saying what to do, and that it wrote no epoch.
func initRefused(t *testing.T, b *redissimba.Backend, c redis.UniversalClient, ns, sign string) {
	t.Helper()
	err := b.Init(ctxT(t))
	if !errors.Is(err, driver.ErrInitUnsafe) || !strings.Contains(err.Error(), sign) || !strings.Contains(err.Error(), "ForceInit (simba init --force)") {
		t.Fatalf("Init = %v, want ErrInitUnsafe saying %q and what to do", err, sign)
	}
	if n, err := c.Exists(ctxT(t), "simba:{"+ns+"}:epoch").Result(); err != nil || n != 0 {
		t.Fatalf("a refused Init left an epoch: %d, %v", n, err)
	}
}

// quarantinedThenAbove asserts that the first Acquire of x is quarantined
// and the grant after it is above every token handed out before (last).
func quarantinedThenAbove(t *testing.T, b *redissimba.Backend, last uint64) {
	t.Helper()
	id := open(t, b, initLease)
	awaitQuarantine(t, b, id, initLease, "x")
	if tok := acquire(t, b, id, "x")[0]; tok <= last {
		t.Fatalf("token after the quarantine = %d, want > %d", tok, last)
	}
}

// A server up for less than one maximum lease may have restarted without
// persistence: Init refuses; once it has been up that long, Init creates
// the namespace and the first Acquire is granted at once.
func TestInitRefusesOnAYoungServer(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	ns := namespace(t)
	b := newUninitialised(t, c, ns, redissimba.WithMaxLease(initLease))
	// An hour's lease for the refusal: it holds however slow this machine.
	initRefused(t, newUninitialised(t, c, ns, redissimba.WithMaxLease(time.Hour)), c, ns, "s ago, less than one maximum lease")
	upFor(t, c, initLease)
	if err := b.Init(ctxT(t)); err != nil {
		t.Fatalf("Init on a server up for %v = %v", initLease, err)
	}
	if tok := acquire(t, b, open(t, b, initLease), "x")[0]; tok == 0 {
		t.Fatal("x not granted at once after Init")
	}
	if err := b.Init(ctxT(t)); err != nil { // at every deployment: harmless
		t.Fatalf("Init again = %v", err)
	}
}

// A server whose persistence looks complete (appendonly yes, appendfsync
// always) can still have restarted empty: a container whose AOF directory
// was not on a volume, or AOF turned on by an operator after a restart
// without persistence. Its uptime is then the only sign: Init refuses on
// a young server whatever its persistence (ADR 0165, amended). Here H's
// lease is lost with a restart, AOF is turned on after it, and Init must
// not hand x to another session at once.
func TestInitRefusesOnAYoungServerWithAOF(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	upFor(t, c, initLease)
	ns := namespace(t)
	b := newUninitialised(t, c, ns, redissimba.WithMaxLease(initLease))
	if err := b.Init(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tx := acquire(t, b, open(t, b, initLease), "x")[0]
	s.restartEmpty()
	for k, v := range map[string]string{"appendonly": "yes", "appendfsync": "always"} {
		if err := c.ConfigSet(ctxT(t), k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, 10*time.Second, "AOF on", func() bool { return infoField(c, "persistence", "aof_enabled") == "1" })
	// An hour's lease for the refusal: the server is young however slow
	// this machine.
	initRefused(t, newUninitialised(t, c, ns, redissimba.WithMaxLease(time.Hour)), c, ns, "s ago, less than one maximum lease")
	quarantinedThenAbove(t, b, tx)
}

// A restart without persistence loses the namespace: Init right after it
// (a deploy job, an application's start-up) refuses, the first Acquire is
// quarantined, and its token is above the lost ones.
func TestInitAfterRestartWithoutPersistence(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	upFor(t, c, initLease)
	ns := namespace(t)
	b := newUninitialised(t, c, ns, redissimba.WithMaxLease(initLease))
	if err := b.Init(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tx := acquire(t, b, open(t, b, initLease), "x")[0]
	s.restartEmpty()
	c = s.client(s.addr())
	b = newUninitialised(t, c, ns, redissimba.WithMaxLease(initLease))
	initRefused(t, newUninitialised(t, c, ns, redissimba.WithMaxLease(time.Hour)), c, ns, "s ago, less than one maximum lease")
	quarantinedThenAbove(t, b, tx)
}

// FLUSHALL (or FLUSHDB) since the server started: Init refuses, however
// long the server has been up. SWAPDB with an empty database is the same
// loss: the holder's session went with the other database, and Init
// would hand x to another session at once (ADR 0218).
func TestInitAfterFlushAll(t *testing.T) {
	for _, cmd := range [][]any{{"FLUSHALL"}, {"FLUSHDB"}, {"SWAPDB", 0, 1}} {
		t.Run(cmd[0].(string), func(t *testing.T) {
			s := startServer(t)
			c := s.client(s.addr())
			upFor(t, c, initLease)
			ns := namespace(t)
			b := newUninitialised(t, c, ns, redissimba.WithMaxLease(initLease))
			if err := b.Init(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			tx := acquire(t, b, open(t, b, initLease), "x")[0]
			if err := c.Do(ctxT(t), cmd...).Err(); err != nil {
				t.Fatal(err)
			}
			initRefused(t, b, c, ns, "FLUSHALL, FLUSHDB or SWAPDB ran 1 time(s)")
			quarantinedThenAbove(t, b, tx)
		})
	}
}

// The epoch alone lost (deleted, or written by a version that kept no
// lineage) while the namespace's other records are there: Init refuses.
func TestInitRefusesRecordsOfAnotherEpoch(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(initLease))
	tx := acquire(t, b, open(t, b, initLease), "x")[0]
	for _, k := range []string{"epoch", "lineage"} {
		if err := c.Del(ctxT(t), "simba:{"+ns+"}:"+k).Err(); err != nil {
			t.Fatal(err)
		}
		initRefused(t, b, c, ns, "records of an earlier one are there")
	}
	quarantinedThenAbove(t, b, tx)
}

// A node promoted from a replica since it started may lack the writes the
// old master acknowledged, the namespace's first ones among them: Init of
// a namespace it does not know refuses there. On a replica Init refuses
// too (a write there is lost at the next sync).
func TestInitRefusesOnAPromotedReplica(t *testing.T) {
	p := startReplicaPair(t)
	ns := namespace(t)
	rb := newUninitialised(t, p.bc, ns, redissimba.WithMaxLease(initLease))
	upFor(t, p.bc, initLease)
	initRefused(t, rb, p.bc, ns, "the node serving the namespace is a replica")
	replicaOf(t, p.bc, nil)
	initRefused(t, rb, p.bc, ns, "the server was promoted from a replica since it started")
	quarantinedThenAbove(t, rb, 0)
	// ForceInit is the operator's word: it creates the epoch anyway.
	fb := newUninitialised(t, p.bc, namespace(t), redissimba.WithMaxLease(initLease))
	if err := fb.ForceInit(ctxT(t)); err != nil {
		t.Fatalf("ForceInit on a promoted replica = %v", err)
	}
	if tok := acquire(t, fb, open(t, fb, initLease), "x")[0]; tok == 0 {
		t.Fatal("x not granted at once after ForceInit")
	}
}
