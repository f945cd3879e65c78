package redissimba_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// The replication history of the namespace's dataset (ADR 0163): every
// promotion gives the promoted node a new master_replid, and a process
// that resynchronises from a replica keeps its run_id, so the epoch
// records both and a change of either is a loss.

// replicaPair is a private master and a replica that replicates from it
// through a proxy, so that the test can cut the replica's link.
type replicaPair struct {
	a, b   *server
	link   *proxy // b → a
	ac, bc *redis.Client
}

func startReplicaPair(t *testing.T) *replicaPair {
	t.Helper()
	a := startServer(t, "--repl-diskless-sync-delay", "0")
	link := startProxy(t, a.addr())
	host, port, err := net.SplitHostPort(link.addr())
	if err != nil {
		t.Fatal(err)
	}
	b := startServer(t, "--repl-diskless-sync-delay", "0", "--replicaof", host, port)
	p := &replicaPair{a: a, b: b, link: link, ac: a.client(a.addr()).(*redis.Client), bc: b.client(b.addr()).(*redis.Client)}
	waitAcked(t, p.ac)
	return p
}

// waitAcked writes on primary and waits until its one replica has
// acknowledged everything up to that write (WAIT).
func waitAcked(t *testing.T, primary *redis.Client) {
	t.Helper()
	if err := primary.Set(ctxT(t), "sync-probe", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := primary.Wait(ctxT(t), 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s: %d replicas, %v", primary.Options().Addr, n, err)
	}
}

func replicaOf(t *testing.T, c *redis.Client, s *server) {
	t.Helper()
	host, port := "NO", "ONE"
	if s != nil {
		host, port = "127.0.0.1", strconv.Itoa(s.port)
	}
	if err := c.ReplicaOf(ctxT(t), host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF %s %s on %s: %v", host, port, c.Options().Addr, err)
	}
}

func replID(t *testing.T, c redis.UniversalClient) string {
	t.Helper()
	info, err := c.Info(ctxT(t), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "master_replid:"); ok {
			return v
		}
	}
	t.Fatalf("no master_replid in %q", info)
	return ""
}

// expectQuarantine asserts that an Acquire of name by a new session of b
// is quarantined for at most maxLease, not granted: holderTok is the
// token of the term its holder still believes in.
func expectQuarantine(t *testing.T, b *redissimba.Backend, maxLease time.Duration, name string, holderTok uint64, what string) driver.ID {
	t.Helper()
	o := open(t, b, maxLease)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{name}})
	if err != nil {
		t.Fatalf("%s: Acquire(%s) = %v", what, name, err)
	}
	if r.Results[0].Token != 0 {
		t.Fatalf("%s: another session got %s at once (token %d) while its holder believes in token %d: two holders", what, name, r.Results[0].Token, holderTok)
	}
	if r.Quarantine <= 0 || r.Quarantine > maxLease {
		t.Fatalf("%s: Quarantine = %v, want in (0, %v]", what, r.Quarantine, maxLease)
	}
	return o
}

// TestFailoverAndBackQuarantines: B is a replica whose link is cut; H
// acquires x on master A; B is promoted; A rejoins as B's replica and
// resynchronises (losing x); A is promoted again. A's process, and so its
// run_id, never changed, but the history of its data did: the first
// Acquire there is quarantined instead of handing x to another session
// while H believes in it.
func TestFailoverAndBackQuarantines(t *testing.T) {
	const maxLease = 2 * time.Second
	p := startReplicaPair(t)
	ns := namespace(t)
	b := newBackend(t, p.ac, ns, redissimba.WithMaxLease(maxLease))
	h := open(t, b, maxLease)
	waitAcked(t, p.ac) // B has the epoch and H's session, not x

	p.link.setCut(true)
	tx := acquire(t, b, h, "x")[0]
	if tx == 0 {
		t.Fatal("x not granted on A before the failover")
	}
	before := replID(t, p.ac)

	replicaOf(t, p.bc, nil) // B promoted, without x
	replicaOf(t, p.ac, p.b) // A follows B: a full resync drops x
	waitAcked(t, p.bc)
	replicaOf(t, p.ac, nil) // and A is promoted back
	replicaOf(t, p.bc, p.a)
	if after := replID(t, p.ac); after == before {
		t.Fatalf("A's master_replid %s unchanged by two promotions", after)
	}

	other := newUninitialised(t, p.ac, ns, redissimba.WithMaxLease(maxLease))
	o := expectQuarantine(t, other, maxLease, "x", tx, "first Acquire after failover and back")
	// H's session came back from B without x: its next renewal says so.
	if got := renew(t, b, h, 0); len(got.Leases) != 0 {
		t.Fatalf("H after failover and back: %+v, want no lease (x was granted after B's link was cut)", got)
	}
	awaitQuarantine(t, other, o, maxLease, "x")
	if tok := acquire(t, other, o, "x")[0]; tok <= tx {
		t.Fatalf("token after the quarantine = %d, want > %d", tok, tx)
	}
	// The quarantine recorded the new history: no second one.
	if tok := acquire(t, b, open(t, b, maxLease), "y")[0]; tok == 0 {
		t.Fatal("y not granted after the quarantine: a second quarantine for the same failover")
	}
}

// pollUntil polls cond every 50 ms until it holds, failing after limit: the
// servers' own replication and failover machinery has no event to wait on.
func pollUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not after %v", what, limit)
		}
		waitTimer(50 * time.Millisecond)
	}
}

// infoField reads one field of an INFO section of c ("" on error).
func infoField(c redis.UniversalClient, section, field string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	return parseINFO(info)[field]
}

func parseINFO(info string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// syncedReplicaOf reports whether c is a replica of primary with its link
// up and no sync in progress.
func syncedReplicaOf(c redis.UniversalClient, primary *server) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return false
	}
	f := parseINFO(info)
	return f["role"] == "slave" && f["master_port"] == strconv.Itoa(primary.port) &&
		f["master_link_status"] == "up" && f["master_sync_in_progress"] == "0"
}

// sentinelFailover asks the Sentinel for a failover of "m" until it
// starts one (it refuses while it knows no good replica) and waits until
// it names to as the master.
func sentinelFailover(t *testing.T, sc *redis.SentinelClient, to *server) {
	t.Helper()
	pollUntil(t, 30*time.Second, "SENTINEL FAILOVER m accepted", func() bool {
		return sc.Failover(ctxT(t), "m").Err() == nil
	})
	pollUntil(t, 30*time.Second, "Sentinel names the new master", func() bool {
		a, err := sc.GetMasterAddrByName(ctxT(t), "m").Result()
		return err == nil && len(a) == 2 && a[1] == strconv.Itoa(to.port)
	})
}

// TestSentinelFailoverAndBackQuarantines: the failover and back of
// TestFailoverAndBackQuarantines done by a real Redis Sentinel (SENTINEL
// FAILOVER twice; the Sentinel turns the old master into a replica, which
// resynchronises), through go-redis's failover client: the first failover
// goes to a replica whose link was cut (it misses x), the second back to
// the first process.
func TestSentinelFailoverAndBackQuarantines(t *testing.T) {
	const maxLease = 2 * time.Second
	p := startReplicaPair(t)
	sen := startSentinel(t, p.a)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = sc.Close() })
	pollUntil(t, 15*time.Second, "the Sentinel knows the replica", func() bool {
		rs, err := sc.Replicas(ctxT(t), "m").Result()
		return err == nil && len(rs) == 1 && rs[0]["port"] == strconv.Itoa(p.b.port)
	})
	failover := func() redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: "m", SentinelAddrs: []string{sen.addr()},
			ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ns := namespace(t)
	b := newBackend(t, failover(), ns, redissimba.WithMaxLease(maxLease))
	h := open(t, b, maxLease)
	waitAcked(t, p.ac)
	p.link.setCut(true)
	tx := acquire(t, b, h, "x")[0]
	if tx == 0 {
		t.Fatal("x not granted before the failover")
	}

	sentinelFailover(t, sc, p.b) // to the replica that missed x
	pollUntil(t, 60*time.Second, "the Sentinel turns A into B's replica", func() bool { return syncedReplicaOf(p.ac, p.b) })
	sentinelFailover(t, sc, p.a) // and back

	other := newUninitialised(t, failover(), ns, redissimba.WithMaxLease(maxLease))
	o := expectQuarantine(t, other, maxLease, "x", tx, "first Acquire after a Sentinel failover and back")
	awaitQuarantine(t, other, o, maxLease, "x")
	if tok := acquire(t, other, o, "x")[0]; tok <= tx {
		t.Fatalf("token after the quarantine = %d, want > %d", tok, tx)
	}
}

// startClusterPair starts a private Redis Cluster of one master holding
// every slot and its replica (bus ports chosen too: the default, port +
// 10000, may fall outside the port range).
func startClusterPair(t *testing.T) (a, b *server) {
	t.Helper()
	node := func() *server {
		dir := t.TempDir()
		return startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf",
			"--cluster-port", strconv.Itoa(freePort(t)), "--cluster-node-timeout", "5000", "--repl-diskless-sync-delay", "0")
	}
	a, b = node(), node()
	ac, bc := a.client(a.addr()).(*redis.Client), b.client(b.addr()).(*redis.Client)
	if err := ac.Do(ctxT(t), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	bus := func(c *redis.Client) string {
		v, _ := c.ConfigGet(ctxT(t), "cluster-port").Result()
		return v["cluster-port"]
	}
	if err := bc.Do(ctxT(t), "CLUSTER", "MEET", "127.0.0.1", a.port, bus(ac)).Err(); err != nil {
		t.Fatal(err)
	}
	aid, err := ac.ClusterMyID(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 15*time.Second, "B meets A", func() bool {
		return bc.Do(ctxT(t), "CLUSTER", "REPLICATE", aid).Err() == nil
	})
	pollUntil(t, 30*time.Second, "the cluster is ok with B a synced replica of A", func() bool {
		return syncedReplicaOf(bc, a) && clusterOK(ac) && clusterOK(bc)
	})
	return a, b
}

func clusterOK(c *redis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.ClusterInfo(ctx).Result()
	return err == nil && strings.Contains(s, "cluster_state:ok")
}

// takeover makes replica r master by CLUSTER FAILOVER TAKEOVER and waits
// until the old master m follows it, synced.
func takeover(t *testing.T, r, m *server) {
	t.Helper()
	rc, mc := r.client(r.addr()), m.client(m.addr())
	if err := rc.Do(ctxT(t), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "the old master follows the new one", func() bool {
		return syncedReplicaOf(mc, r) && infoField(rc, "replication", "role") == "master"
	})
}

// TestClusterTakeoverAndBackQuarantines: CLUSTER FAILOVER TAKEOVER to the
// replica and back. The namespace ends on the process that wrote its
// epoch, under the same run_id, with a history that changed twice: the
// first Acquire there is quarantined.
func TestClusterTakeoverAndBackQuarantines(t *testing.T) {
	const maxLease = 2 * time.Second
	a, r := startClusterPair(t)
	client := func() redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{a.addr(), r.addr()}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ns := namespace(t)
	b := newBackend(t, client(), ns, redissimba.WithMaxLease(maxLease))
	h := open(t, b, maxLease)
	tx := acquire(t, b, h, "x")[0]
	if tx == 0 {
		t.Fatal("x not granted before the takeover")
	}
	takeover(t, r, a)
	takeover(t, a, r)
	other := newUninitialised(t, client(), ns, redissimba.WithMaxLease(maxLease))
	o := expectQuarantine(t, other, maxLease, "y", tx, "first Acquire after a Cluster takeover and back")
	awaitQuarantine(t, other, o, maxLease, "y")
	if tok := acquire(t, other, o, "y")[0]; tok == 0 {
		t.Fatal("y not granted after the quarantine")
	}
}

// A writable replica (replica-read-only no) accepts the acquire's writes
// and drops them at its next sync: the acquire refuses there, with an
// error wrapping ErrServerUnsafe.
func TestAcquireOnAWritableReplicaRefused(t *testing.T) {
	a := startServer(t, "--repl-diskless-sync-delay", "0")
	r := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(a.port), "--replica-read-only", "no")
	ac := a.client(a.addr()).(*redis.Client)
	waitAcked(t, ac)
	ns := namespace(t)
	newBackend(t, ac, ns)
	waitAcked(t, ac)
	rb := newUninitialised(t, r.client(r.addr()), ns)
	id := open(t, rb, time.Second)
	_, err := rb.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
	if !errors.Is(err, redissimba.ErrServerUnsafe) || !strings.Contains(err.Error(), "is a replica") {
		t.Fatalf("Acquire on a writable replica = %v, want ErrServerUnsafe naming the replica", err)
	}
}

// The run_id and the history are two rules: a process other than the
// epoch's writer serving the same history (a restart whose replication ID
// came back from an RDB file, as a replica's does) is still another
// process, which may have restarted from an older state.
func TestOtherRunIDSameHistoryQuarantines(t *testing.T) {
	const maxLease = 300 * time.Millisecond
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(maxLease))
	if got, err := c.HGet(ctxT(t), "simba:{"+ns+"}:lineage", "h").Result(); err != nil || got != replID(t, c) {
		t.Fatalf("lineage after ForceInit = %q, %v; want the server's master_replid", got, err)
	}
	if err := c.Set(ctxT(t), "simba:{"+ns+"}:epoch", "0 "+strings.Repeat("ab", 20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	id := open(t, b, time.Second)
	awaitQuarantine(t, b, id, maxLease, "x")
	if tok := acquire(t, b, id, "x")[0]; tok == 0 {
		t.Fatal("x not granted after the quarantine")
	}
}

// The fenced set through a failover and back (issue 21's matrix): the
// fence is as durable as the Redis it lives on. What the replica had
// acknowledged (WAIT) survives, so an earlier token is still refused; a
// fence write the replica missed is lost with the data, and the token it
// had recorded is accepted again. WAIT after FencedSet makes a write
// outlive a failover.
func TestFencedSetAcrossFailoverAndBack(t *testing.T) {
	p := startReplicaPair(t)
	ctx := ctxT(t)
	set := func(c *redis.Client, tok uint64) error {
		return redissimba.FencedSet(ctx, c, "{o}:fence", "{o}:data", tok, strconv.FormatUint(tok, 10), 0)
	}
	if err := set(p.ac, 10); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, p.ac)
	p.link.setCut(true)
	if err := set(p.ac, 20); err != nil { // acknowledged by A alone
		t.Fatal(err)
	}
	replicaOf(t, p.bc, nil)
	replicaOf(t, p.ac, p.b)
	waitAcked(t, p.bc)
	replicaOf(t, p.ac, nil)
	if err := set(p.ac, 9); !errors.Is(err, redissimba.ErrFenced) {
		t.Fatalf("FencedSet(9) after failover and back = %v, want ErrFenced (10 was replicated)", err)
	}
	if err := set(p.ac, 15); err != nil {
		t.Fatalf("FencedSet(15) after failover and back = %v: the fence at 20 was lost with the unreplicated write, as documented", err)
	}
}

// TestSentinelFailoverToLaggingReplicaQuarantines: one Sentinel failover
// to a replica whose link was cut while H acquired x: the promoted replica
// lacks x, and the first Acquire through the failover client is
// quarantined instead of granting it.
func TestSentinelFailoverToLaggingReplicaQuarantines(t *testing.T) {
	const maxLease = 2 * time.Second
	p := startReplicaPair(t)
	sen := startSentinel(t, p.a)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = sc.Close() })
	pollUntil(t, 15*time.Second, "the Sentinel knows the replica", func() bool {
		rs, err := sc.Replicas(ctxT(t), "m").Result()
		return err == nil && len(rs) == 1 && rs[0]["port"] == strconv.Itoa(p.b.port)
	})
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = fc.Close() })
	ns := namespace(t)
	b := newBackend(t, fc, ns, redissimba.WithMaxLease(maxLease))
	h := open(t, b, maxLease)
	waitAcked(t, p.ac)
	p.link.setCut(true)
	tx := acquire(t, b, h, "x")[0]
	if tx == 0 {
		t.Fatal("x not granted before the failover")
	}
	sentinelFailover(t, sc, p.b)
	fresh := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = fresh.Close() })
	other := newUninitialised(t, fresh, ns, redissimba.WithMaxLease(maxLease))
	o := expectQuarantine(t, other, maxLease, "x", tx, "first Acquire after a Sentinel failover to a lagging replica")
	awaitQuarantine(t, other, o, maxLease, "x")
	if tok := acquire(t, other, o, "x")[0]; tok <= tx {
		t.Fatalf("token after the quarantine = %d, want > %d", tok, tx)
	}
}

// TestFailoverAndBackByPartialResyncQuarantines: TestFailoverAndBackQuarantines
// where A rejoins B by a partial resynchronisation, which loads nothing, so
// the acquire function on A keeps the state of its library (the last INFO
// replication text it parsed, ADR 0315) across A's time as a replica. A
// acquires (its function parses history A1); B is promoted with everything;
// A follows B by PSYNC continue, then loses its link; B quarantines, records
// its history and grants x to H; A is promoted back without any of it: its
// lineage still says A1, its history is a third one. The first Acquire on A
// is quarantined: the function parses the text it reads, not the one it
// parsed before.
func TestFailoverAndBackByPartialResyncQuarantines(t *testing.T) {
	const maxLease = 2 * time.Second
	p := startReplicaPair(t)
	ns := namespace(t)
	ba := newBackend(t, p.ac, ns, redissimba.WithMaxLease(maxLease))
	if tok := acquire(t, ba, open(t, ba, maxLease), "w")[0]; tok == 0 {
		t.Fatal("w not granted on A")
	}
	waitAcked(t, p.ac) // B has everything A wrote

	replicaOf(t, p.bc, nil) // B promoted, with everything
	link := startProxy(t, p.b.addr())
	host, port, err := net.SplitHostPort(link.addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ac.ReplicaOf(ctxT(t), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "A synced with B", func() bool {
		f := parseINFO(infoOf(t, p.ac, "replication"))
		return f["role"] == "slave" && f["master_link_status"] == "up" && f["master_sync_in_progress"] == "0"
	})
	if st := parseINFO(infoOf(t, p.bc, "stats")); st["sync_partial_ok"] == "0" || st["sync_full"] != "0" {
		t.Fatalf("A did not rejoin B by a partial resynchronisation (B's stats: sync_full %s, sync_partial_ok %s): the case needs one", st["sync_full"], st["sync_partial_ok"])
	}
	link.setCut(true) // A misses what B writes from now on

	bb := newUninitialised(t, p.bc, ns, redissimba.WithMaxLease(maxLease))
	hb := open(t, bb, maxLease)
	awaitQuarantine(t, bb, hb, maxLease, "x") // B's first Acquire: another process, another history
	tx := acquire(t, bb, hb, "x")[0]
	if tx == 0 {
		t.Fatal("x not granted on B after its quarantine")
	}

	replicaOf(t, p.ac, nil) // A promoted back, without B's writes
	other := newUninitialised(t, p.ac, ns, redissimba.WithMaxLease(maxLease))
	expectQuarantine(t, other, maxLease, "x", tx, "first Acquire on A after failover and back by partial resync")
}

func infoOf(t *testing.T, c *redis.Client, section string) string {
	t.Helper()
	s, err := c.Info(ctxT(t), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
