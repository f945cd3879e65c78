package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/integration/faultcheck"
	"github.com/simba-go/simba/integration/tcpproxy"
	"github.com/simba-go/simba/simbatest"
)

// The deployments of issue 21 in the fault runs: what operators do to
// replicated servers (a Sentinel failover to a lagging replica, a
// failover and back, a Cluster takeover and back, a stalled ZooKeeper
// follower), each a deployment of its own with the worker faults. The
// Redis servers are processes of this test on ports of its own range
// (Sentinel and replication are set up by hand; simbatest starts neither).

// faultPortLo..faultPortHi are the ports of the servers these deployments
// start: a range of their own, apart from the shared servers' and, mostly,
// from the random ports simbatest picks, each still checked free.
const faultPortLo, faultPortHi = 22600, 22699

var faultPorts struct {
	sync.Mutex
	given map[int]bool
}

// privatePorts returns n free ports of the range, given back when the
// test ends.
func privatePorts(t *testing.T, n int) []int {
	t.Helper()
	faultPorts.Lock()
	defer faultPorts.Unlock()
	if faultPorts.given == nil {
		faultPorts.given = map[int]bool{}
	}
	var out []int
	for p := faultPortLo; p <= faultPortHi && len(out) < n; p++ {
		if faultPorts.given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		faultPorts.given[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		t.Fatalf("fault harness: %d free ports wanted in %d-%d, %d found", n, faultPortLo, faultPortHi, len(out))
	}
	t.Cleanup(func() {
		faultPorts.Lock()
		defer faultPorts.Unlock()
		for _, p := range out {
			delete(faultPorts.given, p)
		}
	})
	return out
}

// redisProc is a redis-server (or redis-sentinel) process of the test,
// without persistence, its output in the rig's directory (not *.log: those
// are the checker's).
type redisProc struct {
	port int
	cmd  *exec.Cmd
	done chan struct{}
	c    *redis.Client // the controller's client
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// startRedisProc runs bin (redis-server when empty) with args on port and
// waits until it answers PING; it is killed when the test ends.
func startRedisProc(t *testing.T, r *rig, bin string, port int, args ...string) *redisProc {
	t.Helper()
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("fault harness: %s not found (scripts/services/redis.sh installs it): %v", bin, err)
	}
	out, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("redis-%d.out", port)))
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProc{port: port, cmd: exec.Command(path, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("fault harness: start %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); _ = out.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	p.c = redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = p.c.Close() })
	if err := poll(t.Context(), 10*time.Second, func() bool { return p.c.Ping(t.Context()).Err() == nil }); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("fault harness: %s on %d does not answer PING: %v\n%s", bin, port, err, b)
	}
	return p
}

// redisArgs are the common redis-server arguments: no persistence,
// replication without a wait for a diskless sync.
func redisArgs(r *rig, port int, extra ...string) []string {
	dir := filepath.Join(r.dir, "redis-"+strconv.Itoa(port))
	_ = os.MkdirAll(dir, 0o755)
	return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--repl-diskless-sync-delay", "0"}, extra...)
}

// poll calls cond every 50 ms until it holds or d has passed: the servers'
// replication and failover machinery has no event to wait on.
func poll(ctx context.Context, d time.Duration, cond func() bool) error {
	end := time.Now().Add(d)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("not within %v", d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// replInfo is the INFO replication section of c as fields.
func replInfo(ctx context.Context, c *redis.Client) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := c.Info(ctx, "replication").Result()
	f := map[string]string{}
	if err != nil {
		return f
	}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// syncedTo reports whether c is a replica of the master at port with its
// link up and no sync in progress.
func syncedTo(ctx context.Context, c *redis.Client, port int) bool {
	f := replInfo(ctx, c)
	return f["role"] == "slave" && f["master_port"] == strconv.Itoa(port) &&
		f["master_link_status"] == "up" && f["master_sync_in_progress"] == "0"
}

// replicaOf makes c a replica of the server at port (0: a master).
func replicaOf(ctx context.Context, c *redis.Client, port int) error {
	host, p := "NO", "ONE"
	if port != 0 {
		host, p = "127.0.0.1", strconv.Itoa(port)
	}
	if err := c.ReplicaOf(ctx, host, p).Err(); err != nil {
		return fmt.Errorf("REPLICAOF %s %s on %s: %w", host, p, c.Options().Addr, err)
	}
	return nil
}

// redisPair is a master and a replica whose replication link goes through
// a proxy in front of the master, which the faults cut so that the replica
// misses writes (a silent cut: the replica's link looks up).
type redisPair struct {
	nodes        [2]*redisProc
	link         [2]*tcpproxy.Proxy // link[i] forwards to nodes[i]
	master       int
	cuts, lagged int // faults, and those after which the replica lagged
}

func startRedisPair(t *testing.T, r *rig, ports []int, extra ...string) *redisPair {
	t.Helper()
	d := &redisPair{}
	for i := range 2 {
		d.nodes[i] = startRedisProc(t, r, "", ports[i], redisArgs(r, ports[i], extra...)...)
		p, err := tcpproxy.New(d.nodes[i].addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		d.link[i] = p
	}
	if err := d.replicate(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	return d
}

func proxyPort(p *tcpproxy.Proxy) int {
	_, s, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(s)
	return n
}

// replicate makes node i a replica of the master through the master's
// link proxy, unless it is one already, and waits until it is synced.
func (d *redisPair) replicate(ctx context.Context, i int) error {
	c, port := d.nodes[i].c, proxyPort(d.link[d.master])
	if syncedTo(ctx, c, port) {
		return nil
	}
	if err := replicaOf(ctx, c, port); err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, func() bool { return syncedTo(ctx, c, port) }); err != nil {
		return fmt.Errorf("%s synced with the master through its link: %w", d.nodes[i].addr(), err)
	}
	return nil
}

// initRedis initialises the workers' namespace on c (ForceInit: the
// servers were started just now, ADR 0165) and closes c.
func initRedis(t *testing.T, r *rig, c redis.UniversalClient) {
	t.Helper()
	defer func() { _ = c.Close() }()
	b, err := redissimba.New(c, r.ns, redissimba.WithMaxLease(faultLease))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := b.ForceInit(ctx); err != nil {
		t.Fatalf("fault harness: init %s: %v", r.ns, err)
	}
}

// cutFor cuts the master's side of the replication link for d, so that
// its writes miss the replica, and counts whether they did: the master's
// replication offset ahead of the replica's when the cut ends.
func (d *redisPair) cutFor(ctx context.Context, dur time.Duration) {
	d.link[d.master].Cut(true)
	sleep(ctx, dur)
	m, _ := strconv.ParseInt(replInfo(ctx, d.nodes[d.master].c)["master_repl_offset"], 10, 64)
	r, _ := strconv.ParseInt(replInfo(ctx, d.nodes[1-d.master].c)["slave_repl_offset"], 10, 64)
	d.cuts++
	if m > r {
		d.lagged++
	}
}

// logLag says, when the test ends, after how many cuts the replica had
// missed writes.
func (d *redisPair) logLag(t *testing.T, fault string) {
	t.Cleanup(func() { t.Logf("%s: the replica had missed writes at %d of %d cuts", fault, d.lagged, d.cuts) })
}

// setupSentinelLagging: a master and a replica monitored by a Redis
// Sentinel, the workers following the master through go-redis's failover
// client; the fault cuts the replica's link and has the Sentinel fail over
// to it (SENTINEL FAILOVER): it lacks the master's last writes. Both nodes
// run with min-replicas-to-write 1, min-replicas-max-lag 1, and the
// failover comes at least 3 s (max-lag + 2 s) after the cut: the settings
// backend-redis/README.md names against a split brain (ADR 0216), without
// which a worker still connected to the old master renews there.
func setupSentinelLagging(t *testing.T, r *rig) ([]string, bool) {
	ps := privatePorts(t, 3)
	d := startRedisPair(t, r, ps[:2], "--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")
	bin := os.Getenv("SIMBA_REDIS_SENTINEL_BIN")
	if bin == "" {
		bin = "redis-sentinel"
	}
	dir := filepath.Join(r.dir, "sentinel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	// failover-timeout 20 min: the Sentinel corrects a replica that follows
	// another address than the master's (the link proxy) only after it,
	// and the faults re-point the replica after every failover.
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
		"sentinel monitor m 127.0.0.1 %d 1\nsentinel down-after-milliseconds m 5000\nsentinel failover-timeout m 1200000\n",
		ps[2], dir, d.nodes[0].port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sen := startRedisProc(t, r, bin, ps[2], conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = sc.Close() })
	if err := poll(t.Context(), 30*time.Second, func() bool {
		rs, err := sc.Replicas(t.Context(), "m").Result()
		return err == nil && len(rs) == 1 && rs[0]["port"] == strconv.Itoa(d.nodes[1].port)
	}); err != nil {
		t.Fatalf("fault harness: the Sentinel knows the replica: %v", err)
	}
	initRedis(t, r, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}, ContextTimeoutEnabled: true}))
	d.logLag(t, "sentinel-failover-lagging")
	r.faults = append(r.faults, fault{"sentinel-failover-lagging", func(ctx context.Context, r *rig) error {
		m, s := d.master, 1-d.master
		if err := d.replicate(ctx, s); err != nil {
			return err
		}
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: d.nodes[m].addr(), T: faultcheck.Now(), Reason: "sentinel-failover-lagging"})
		d.cutFor(ctx, 3*time.Second+leases(0, 0.5))
		err := sentinelFailover(ctx, sc, d.nodes[s].port)
		d.link[m].Cut(false)
		if err != nil {
			return err
		}
		d.master = s
		// The old master follows the new one (the Sentinel would, 8 s
		// later), through its link, and resynchronises: what the promoted
		// replica missed is gone.
		return d.replicate(ctx, m)
	}})
	return []string{sen.addr()}, false
}

// sentinelFailover asks the Sentinel to fail "m" over (it refuses while it
// sees no good replica) and waits until it names the node at port.
func sentinelFailover(ctx context.Context, sc *redis.SentinelClient, port int) error {
	if err := poll(ctx, 30*time.Second, func() bool { return sc.Failover(ctx, "m").Err() == nil }); err != nil {
		return fmt.Errorf("SENTINEL FAILOVER m accepted: %w (last: %v)", err, sc.Failover(ctx, "m").Err())
	}
	if err := poll(ctx, 30*time.Second, func() bool {
		a, err := sc.GetMasterAddrByName(ctx, "m").Result()
		return err == nil && len(a) == 2 && a[1] == strconv.Itoa(port)
	}); err != nil {
		return fmt.Errorf("the Sentinel names 127.0.0.1:%d master: %w", port, err)
	}
	return nil
}

// setupFailback: the workers talk to node A alone; the fault is the
// failover and back of issue 21.1 by hand: B's link cut (it misses A's
// writes), B promoted, A resynchronised from B as its replica (losing
// them), A promoted again; B follows A again. A ends as the same process,
// run_id unchanged, with another history. The workers never see B, so no
// split brain is possible and no min-replicas setting is needed.
func setupFailback(t *testing.T, r *rig) ([]string, bool) {
	d := startRedisPair(t, r, privatePorts(t, 2))
	initRedis(t, r, redis.NewClient(&redis.Options{Addr: d.nodes[0].addr(), ContextTimeoutEnabled: true}))
	a, b := d.nodes[0], d.nodes[1]
	d.logLag(t, "failover-and-back")
	r.faults = append(r.faults, fault{"failover-and-back", func(ctx context.Context, r *rig) error {
		if err := d.replicate(ctx, 1); err != nil {
			return err
		}
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: a.addr(), T: faultcheck.Now(), Reason: "failover-and-back"})
		d.cutFor(ctx, leases(0.5, 1.5))
		if err := replicaOf(ctx, b.c, 0); err != nil {
			return err
		}
		if err := replicaOf(ctx, a.c, b.port); err != nil {
			return err
		}
		if err := poll(ctx, 30*time.Second, func() bool { return syncedTo(ctx, a.c, b.port) }); err != nil {
			return fmt.Errorf("A resynchronised from B: %w", err)
		}
		if err := replicaOf(ctx, a.c, 0); err != nil {
			return err
		}
		d.link[0].Cut(false)
		return d.replicate(ctx, 1)
	}})
	return []string{a.addr()}, false
}

// setupClusterTakeover: a Redis Cluster of three masters, each with a
// replica; the fault is CLUSTER FAILOVER TAKEOVER on the replica of the
// master of the namespace's slot (no agreement, no offset handshake), then,
// once the old master follows it, the same on the old master: back.
func setupClusterTakeover(t *testing.T, r *rig) ([]string, bool) {
	ps := privatePorts(t, 12)
	var nodes []*redisProc
	var as []string
	for i := range 6 {
		cdir := filepath.Join(r.dir, "cluster-"+strconv.Itoa(ps[i]))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		n := startRedisProc(t, r, "", ps[i], redisArgs(r, ps[i], "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(cdir, "nodes.conf"), "--cluster-port", strconv.Itoa(ps[6+i]),
			"--cluster-node-timeout", "5000")...)
		nodes = append(nodes, n)
		as = append(as, n.addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, as...), "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("fault harness: redis-cli --cluster create: %v\n%s", err, out)
	}
	byID := map[string]*redisProc{}
	for _, n := range nodes {
		id, err := n.c.ClusterMyID(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		byID[id] = n
	}
	slot, err := nodes[0].c.ClusterKeySlot(t.Context(), r.ns).Result()
	if err != nil {
		t.Fatal(err)
	}
	// owners returns the master and the replica of the namespace's slot.
	owners := func(ctx context.Context) (m, s *redisProc, err error) {
		for _, n := range nodes {
			shards, err := n.c.ClusterShards(ctx).Result()
			if err != nil {
				continue
			}
			for _, sh := range shards {
				in := false
				for _, sl := range sh.Slots {
					in = in || (int64(sl.Start) <= slot && slot <= int64(sl.End))
				}
				if !in {
					continue
				}
				for _, nd := range sh.Nodes {
					switch {
					case nd.Role == "master" && nd.Health == "online":
						m = byID[nd.ID]
					case nd.Role == "replica" && nd.Health == "online":
						s = byID[nd.ID]
					}
				}
			}
			if m != nil && s != nil && syncedTo(ctx, s.c, m.port) {
				return m, s, nil
			}
			m, s = nil, nil
		}
		return nil, nil, fmt.Errorf("no online master with a synced replica for slot %d", slot)
	}
	ok := func(ctx context.Context) bool {
		for _, n := range nodes {
			if s, err := n.c.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(s, "cluster_state:ok") {
				return false
			}
		}
		_, _, err := owners(ctx)
		return err == nil
	}
	if err := poll(t.Context(), 60*time.Second, func() bool { return ok(t.Context()) }); err != nil {
		t.Fatalf("fault harness: the cluster is ok with synced replicas: %v", err)
	}
	initRedis(t, r, redis.NewClusterClient(&redis.ClusterOptions{Addrs: as, ContextTimeoutEnabled: true}))
	// takeover makes s master and waits until m follows it, synced.
	takeover := func(ctx context.Context, s, m *redisProc) error {
		if err := s.c.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER TAKEOVER on %s: %w", s.addr(), err)
		}
		if err := poll(ctx, 30*time.Second, func() bool {
			return syncedTo(ctx, m.c, s.port) && replInfo(ctx, s.c)["role"] == "master"
		}); err != nil {
			return fmt.Errorf("%s follows %s after the takeover: %w", m.addr(), s.addr(), err)
		}
		return nil
	}
	r.faults = append(r.faults, fault{"takeover-and-back", func(ctx context.Context, r *rig) error {
		var m, s *redisProc
		if err := poll(ctx, 30*time.Second, func() bool {
			var err error
			m, s, err = owners(ctx)
			return err == nil
		}); err != nil {
			return fmt.Errorf("the slot's master and replica: %w", err)
		}
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: m.addr(), T: faultcheck.Now(), Reason: "takeover-and-back"})
		if err := takeover(ctx, s, m); err != nil {
			return err
		}
		sleep(ctx, leases(0, 1))
		return takeover(ctx, m, s)
	}})
	return as, false
}

// setupZooKeeperStall: a three-node ensemble, workers dialing each server
// through a proxy of their own; the fault stops (SIGSTOP) the follower the
// leading worker is connected to for one to three leases, well over a
// renewal period, then resumes it (SIGCONT). The rest of the ensemble
// keeps a quorum, so the leader's term should survive: its session moves
// to another server (issue 21.3, ADR 0177). A leader connected to the
// ensemble's leader is first moved off it (its connection through that
// proxy killed, a "zk-move").
func setupZooKeeperStall(t *testing.T, r *rig) ([]string, bool) {
	s := simbatest.ZooKeeper(t, simbatest.WithCluster())
	zkInit(t, s, r)
	r.faults = append(r.faults, fault{"zk-follower-stall", func(ctx context.Context, r *rig) error {
		w, err := r.faultLeaderQuiet(ctx, "zk-follower-stall")
		if err != nil {
			return err
		}
		i, err := zkServerOf(ctx, w)
		if err != nil {
			return err
		}
		if s.Leader(ctx) == s.Nodes[i] {
			r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: w.id, T: faultcheck.Now(), Reason: "zk-move"})
			w.proxy[i].KillConns()
			sleep(ctx, faultLease/2)
			if i, err = zkServerOf(ctx, w); err != nil {
				return err
			}
			if r.leader() != w {
				return nil // the move cost the term: no stall this round
			}
		}
		n := s.Nodes[i]
		if m := s.Leader(ctx); m == n || m == nil {
			return nil // the session did not land on a follower
		}
		st, err := n.Container.State(ctx)
		if err != nil {
			return err
		}
		pids := processTree(st.Pid)
		r.t.Logf("zk-follower-stall: %s's server %s (follower) stopped", w.id, n.Addr)
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: w.id, T: faultcheck.Now(), Reason: "zk-follower-stall"})
		var errs []error
		for _, p := range pids {
			if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
				// Signalling a container's processes needs the rights of
				// their owner (root with a rootful Docker).
				errs = append(errs, fmt.Errorf("SIGSTOP %d (%s): %w", p, n.Addr, err))
			}
		}
		if len(errs) == 0 {
			sleep(ctx, leases(1, 3))
		}
		for _, p := range pids {
			if err := syscall.Kill(p, syscall.SIGCONT); err != nil {
				errs = append(errs, fmt.Errorf("SIGCONT %d (%s): %w", p, n.Addr, err))
			}
		}
		return errors.Join(errs...)
	}})
	return s.Servers(), true
}

// faultLeaderQuiet waits for the leader without recording a fault.
func (r *rig) faultLeaderQuiet(ctx context.Context, name string) (*worker, error) {
	w := r.waitLeader(ctx, 60*time.Second)
	if w == nil {
		return nil, fmt.Errorf("%s: no leader within 60s", name)
	}
	return w, nil
}

// zkServerOf is the index of the server w's session is connected to: the
// one proxy of w's with a client connection (waits up to 5 s for exactly
// one).
func zkServerOf(ctx context.Context, w *worker) (int, error) {
	at := -1
	err := poll(ctx, 5*time.Second, func() bool {
		at = -1
		for i, p := range w.proxy {
			if p.Clients() > 0 {
				if at >= 0 {
					return false
				}
				at = i
			}
		}
		return at >= 0
	})
	if err != nil {
		return 0, fmt.Errorf("the server %s is connected to: %w", w.id, err)
	}
	return at, nil
}

// processTree is pid and its descendants (a container's init and the
// server it runs), read from /proc.
func processTree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}
