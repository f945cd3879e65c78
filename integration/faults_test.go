package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/integration/faultcheck"
	"github.com/simba-go/simba/integration/tcpproxy"
	"github.com/simba-go/simba/simbatest"
)

// The real-process fault tests: several simba-worker processes per backend
// contend for one election while a controller (this test) applies faults
// to them, to the links between them and the servers, and to the servers;
// faultcheck checks their logs. SIMBA_FAULT_DURATION sets how long each
// backend runs (default 40s; backends run -parallel at a time, two on a 2-core CI machine: the CI slice of about five minutes with setup for the ten deployments before etcd, the two etcd ones one more round of about 50 s);
// `make chaos` runs it long and writes docs/reliability.md. SIMBA_FAULT_ONLY
// (comma-separated) runs some deployments; SIMBA_FAULT_KEEP_LOGS=1 keeps
// every run's logs, not only those of a run with violations.

const faultLease = 2 * time.Second

// workerDir holds the worker binary built for this test binary run;
// TestMain removes it.
var workerDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "simba-worker") })

func removeWorkerBuild() {
	if dir, err := workerDir(); err == nil {
		_ = os.RemoveAll(dir)
	}
}

// buildWorker builds cmd/simba-worker once per test binary run.
var buildWorker = sync.OnceValues(func() (string, error) {
	dir, err := workerDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "simba-worker")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/simba-worker").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build simba-worker: %v\n%s", err, out)
	}
	return bin, nil
})

// worker is one contending process, restarted after SIGKILL with run+1.
type worker struct {
	id    string
	run   int
	cmd   *exec.Cmd
	done  chan struct{}     // closed when cmd has exited
	proxy []*tcpproxy.Proxy // its links to the servers (nil: direct)
	addr  string
	extra []string
}

// rig is one backend's fault run.
type rig struct {
	t       *testing.T
	bin     string
	kind    string
	ns      string
	dir     string
	workers []*worker
	ctl     *os.File // the controller's events (faults, kills)
	faults  []fault
	mu      sync.Mutex
}

type fault struct {
	name  string
	apply func(ctx context.Context, r *rig) error
}

func (r *rig) logPath(w *worker) string {
	return filepath.Join(r.dir, fmt.Sprintf("%s-%d.log", w.id, w.run))
}

func (r *rig) record(e faultcheck.Event) {
	b, _ := json.Marshal(e)
	r.mu.Lock()
	_, _ = r.ctl.Write(append(b, '\n'))
	r.mu.Unlock()
}

func (r *rig) start(w *worker) {
	r.t.Helper()
	args := []string{"-backend", r.kind, "-addr", w.addr, "-ns", r.ns, "-id", w.id,
		"-run", strconv.Itoa(w.run), "-log", r.logPath(w), "-lease", faultLease.String(),
		"-renew", (faultLease * 3 / 10).String()}
	w.cmd = exec.Command(r.bin, append(args, w.extra...)...)
	errf, err := os.OpenFile(filepath.Join(r.dir, w.id+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	w.cmd.Stderr = errf
	if err := w.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	w.done = make(chan struct{})
	go func(c *exec.Cmd, f *os.File, done chan struct{}) { _ = c.Wait(); _ = f.Close(); close(done) }(w.cmd, errf, w.done)
}

// kill SIGKILLs w's process and records its end.
func (r *rig) kill(w *worker) {
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Kill()
	<-w.done
	r.record(faultcheck.Event{Kind: faultcheck.Exit, Worker: w.id, Run: w.run, T: faultcheck.Now(), Killed: true})
}

// stopAll ends every worker with SIGTERM (clean: OnRevoked must run), or
// SIGKILL after 10 s.
func (r *rig) stopAll() {
	for _, w := range r.workers {
		if w.cmd != nil {
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range r.workers {
		if w.cmd == nil {
			continue
		}
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			r.kill(w)
		}
	}
}

// leader is the worker whose current run last logged elected (nil: none).
func (r *rig) leader() *worker {
	for _, w := range r.workers {
		f, err := os.Open(r.logPath(w))
		if err != nil {
			continue
		}
		leads := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e faultcheck.Event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			switch e.Kind {
			case faultcheck.Elected:
				leads = true
			case faultcheck.Revoked, faultcheck.Exit:
				leads = false
			}
		}
		_ = f.Close()
		if leads {
			return w
		}
	}
	return nil
}

// waitLeader waits up to d for some worker to lead.
func (r *rig) waitLeader(ctx context.Context, d time.Duration) *worker {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		if w := r.leader(); w != nil {
			return w
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// leases returns a random duration between lo and hi leases.
func leases(lo, hi float64) time.Duration {
	return time.Duration((lo + rand.Float64()*(hi-lo)) * float64(faultLease))
}

// Faults on the workers, for every backend.
var workerFaults = []fault{
	{"pause-long", func(ctx context.Context, r *rig) error { return r.pauseLeader(ctx, leases(1.5, 3)) }},
	{"pause-deadline", func(ctx context.Context, r *rig) error { return r.pauseLeader(ctx, leases(0.8, 1.2)) }},
	{"kill-restart", func(ctx context.Context, r *rig) error {
		w, err := r.faultLeader(ctx, "kill-restart")
		if err != nil {
			return err
		}
		r.kill(w)
		sleep(ctx, leases(0.5, 1.5))
		w.run++
		r.start(w)
		return nil
	}},
}

// faultLeader waits for the leader and records the fault against it.
func (r *rig) faultLeader(ctx context.Context, name string) (*worker, error) {
	w := r.waitLeader(ctx, 60*time.Second)
	if w == nil {
		return nil, fmt.Errorf("%s: no leader within 60s", name)
	}
	r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: w.id, T: faultcheck.Now(), Reason: name})
	return w, nil
}

func (r *rig) pauseLeader(ctx context.Context, d time.Duration) error {
	name := "pause-long"
	if d < faultLease*3/2 {
		name = "pause-deadline"
	}
	w, err := r.faultLeader(ctx, name)
	if err != nil {
		return err
	}
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	sleep(ctx, d)
	return w.cmd.Process.Signal(syscall.SIGCONT)
}

// Faults on the links, for backends whose workers dial through a proxy.
var linkFaults = []fault{
	{"conn-kill", func(ctx context.Context, r *rig) error {
		w, err := r.faultLeader(ctx, "conn-kill")
		if err != nil {
			return err
		}
		for _, p := range w.proxy {
			p.KillConns()
		}
		return nil
	}},
	{"latency", func(ctx context.Context, r *rig) error {
		w, err := r.faultLeader(ctx, "latency")
		if err != nil {
			return err
		}
		for _, p := range w.proxy {
			p.SetLatency(faultLease / 5)
		}
		sleep(ctx, leases(2, 3))
		for _, p := range w.proxy {
			p.SetLatency(0)
		}
		return nil
	}},
	{"partition", func(ctx context.Context, r *rig) error {
		w, err := r.faultLeader(ctx, "partition")
		if err != nil {
			return err
		}
		for _, p := range w.proxy {
			p.Cut(true)
		}
		sleep(ctx, leases(1.5, 3))
		for _, p := range w.proxy {
			p.Cut(false)
		}
		return nil
	}},
}

// serverRestart stops a server (SIGTERM, SIGKILL after 2 s) and starts it
// again with its data.
func serverRestart(node func() *simbatest.Node) fault {
	return fault{"server-restart", func(ctx context.Context, r *rig) error {
		n := node()
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: n.Addr, T: faultcheck.Now(), Reason: "server-restart"})
		if err := n.Stop(ctx, 2*time.Second); err != nil {
			return err
		}
		sleep(ctx, leases(0.5, 1.5))
		return n.Start(ctx)
	}}
}

// dataLoss reports whether faults that lose Redis data (FLUSHALL, a
// restart without persistence) are applied: on by default since the
// backend quarantines after data loss (ADR 0130, 0131);
// SIMBA_FAULT_DATALOSS=0 turns them off.
func dataLoss() bool { return os.Getenv("SIMBA_FAULT_DATALOSS") != "0" }

// flushAll is the data-loss fault: FLUSHALL on every given node that is a
// master (a replica refuses it with READONLY and loses the data through
// its master).
func flushAll(nodes []*simbatest.Node) fault {
	return fault{"flush", func(ctx context.Context, r *rig) error {
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: nodes[0].Addr, T: faultcheck.Now(), Reason: "flush"})
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr})
			err := c.FlushAll(ctx).Err()
			_ = c.Close()
			if err != nil && !strings.HasPrefix(err.Error(), "READONLY") {
				return err
			}
		}
		return nil
	}}
}

// setups start each backend's servers and say how workers reach them and
// which faults apply.
var setups = []struct {
	name  string
	setup func(t *testing.T, r *rig) (addrs []string, proxied bool)
}{
	{"postgres", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.Postgres(t)
		r.faults = append(r.faults, serverRestart(func() *simbatest.Node { return s.Node }),
			sqlWipe(s.Node.Addr, func(ctx context.Context, q string) error { _, err := s.Pool.Exec(ctx, q); return err }))
		return []string{s.Node.Addr}, true
	}},
	{"mysql", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.MySQL(t)
		r.faults = append(r.faults, serverRestart(func() *simbatest.Node { return s.Node }),
			sqlWipe(s.Node.Addr, func(ctx context.Context, q string) error { _, err := s.DB.ExecContext(ctx, q); return err }))
		return []string{s.Node.Addr}, true
	}},
	{"redis", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.Redis(t, simbatest.WithNamespace(r.ns)) // initialised for the workers
		if dataLoss() {
			r.faults = append(r.faults, serverRestart(func() *simbatest.Node { return s.Nodes[0] }), flushAll(s.Nodes))
		}
		return s.Addrs(), true
	}},
	{"redis-cluster", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.Redis(t, simbatest.WithCluster(), simbatest.WithNamespace(r.ns))
		next := 0
		if dataLoss() {
			r.faults = append(r.faults, flushAll(s.Nodes))
		}
		r.faults = append(r.faults,
			fault{"reshard", func(ctx context.Context, r *rig) error {
				from, to := s.Nodes[next%3], s.Nodes[(next+1)%3]
				next++
				return reshard(ctx, r, from, to)
			}},
			fault{"conn-kill", func(ctx context.Context, r *rig) error {
				r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: "all", T: faultcheck.Now(), Reason: "conn-kill"})
				for _, n := range s.Nodes {
					c := redis.NewClient(&redis.Options{Addr: n.Addr})
					err := c.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err()
					_ = c.Close()
					if err != nil {
						return err
					}
				}
				return nil
			}})
		return s.Addrs(), false
	}},
	{"zookeeper", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.ZooKeeper(t)
		zkInit(t, s, r)
		r.faults = append(r.faults, serverRestart(func() *simbatest.Node { return s.Nodes[0] }), zkRootDelete(s))
		return s.Servers(), true
	}},
	{"zookeeper-ensemble", func(t *testing.T, r *rig) ([]string, bool) {
		s := simbatest.ZooKeeper(t, simbatest.WithCluster())
		zkInit(t, s, r)
		r.faults = append(r.faults, zkRootDelete(s), fault{"zk-leader-kill", func(ctx context.Context, r *rig) error {
			n := s.Leader(ctx)
			if n == nil {
				return fmt.Errorf("no ensemble leader")
			}
			r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: n.Addr, T: faultcheck.Now(), Reason: "zk-leader-kill"})
			if err := n.Kill(ctx); err != nil {
				return err
			}
			sleep(ctx, leases(1, 2))
			return n.Start(ctx)
		}})
		return s.Servers(), true
	}},
	{"redis-sentinel-lagging", setupSentinelLagging},
	{"redis-failback", setupFailback},
	{"redis-cluster-takeover", setupClusterTakeover},
	{"zookeeper-stall", setupZooKeeperStall},
	{"etcd", setupEtcd},
	{"etcd-cluster", setupEtcdCluster},
}

// selected reports whether the deployment runs: every one, or those
// SIMBA_FAULT_ONLY names (comma-separated; `make chaos ONLY=...`).
func selected(name string) bool {
	only := os.Getenv("SIMBA_FAULT_ONLY")
	return only == "" || slices.Contains(strings.Split(only, ","), name)
}

// sqlWipe empties the namespace's tables while the workers run, one
// statement after the other, the data loss of SQL (a TRUNCATE by hand, a
// restore): the quarantine must keep the next leader from acting before
// the old one's term has ended (ADR 0130, 0135). The workers cap leases at
// one lease, so it lasts one lease.
func sqlWipe(addr string, exec func(ctx context.Context, q string) error) fault {
	return fault{"wipe", func(ctx context.Context, r *rig) error {
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: addr, T: faultcheck.Now(), Reason: "wipe"})
		for _, tbl := range []string{"_sessions", "_leases", "_epoch"} {
			// r.ns is "ch" and digits: a valid table prefix.
			if err := exec(ctx, "TRUNCATE TABLE "+r.ns+tbl); err != nil {
				return err
			}
		}
		return nil
	}}
}

// zkRoot is the workers' namespace root (simba-worker's).
func zkRoot(r *rig) string { return "/chaos/" + r.ns }

// zkInit initialises the workers' new namespace, once, before they start:
// a worker must not (a restarted worker's Init after a root deletion would
// skip that loss's quarantine).
func zkInit(t *testing.T, s *simbatest.ZooKeeperServer, r *rig) {
	b, err := zksimba.New(s.Servers(), zkRoot(r))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// ForceInit: a private server started just now, where Init refuses
	// (no node older than MaxLease, ADR 0179); the namespace is new.
	if err := b.ForceInit(ctx); err != nil {
		t.Fatal(err)
	}
}

// zkRootDelete deletes the namespace root and everything under it as an
// operator's zkCli deleteall does (ZKUtil.deleteRecursive: the subtree
// listed breadth-first, then deleted from the end of the list, deepest
// level first), node by node: the records are lost while every session
// lives on. The workers must see the epoch gone and wait out the
// quarantine.
func zkRootDelete(s *simbatest.ZooKeeperServer) fault {
	return fault{"zk-root-delete", func(ctx context.Context, r *rig) error {
		conn, _, err := zk.Connect(s.Servers(), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return err
		}
		defer conn.Close()
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: "all", T: faultcheck.Now(), Reason: "zk-root-delete"})
		// A worker may recreate the epoch meanwhile: that is the loss
		// noticed, which is the point; try again.
		for range 3 {
			tree := []string{zkRoot(r)}
			for i := 0; i < len(tree); i++ {
				children, _, err := conn.Children(tree[i])
				if errors.Is(err, zk.ErrNoNode) {
					continue
				}
				if err != nil {
					return err
				}
				for _, c := range children {
					tree = append(tree, tree[i]+"/"+c)
				}
			}
			err = nil
			for i := len(tree) - 1; i >= 0 && err == nil; i-- {
				if err = conn.Delete(tree[i], -1); errors.Is(err, zk.ErrNoNode) {
					err = nil
				}
			}
			if !errors.Is(err, zk.ErrNotEmpty) {
				return err
			}
		}
		return nil
	}}
}

// reshard moves half the slots of from to to, live, while workers run.
// Half, not all: Redis 7 turns a master that loses its last slot into a
// replica (cluster-allow-replica-migration), and the rotation needs three
// masters.
func reshard(ctx context.Context, r *rig, from, to *simbatest.Node) error {
	id := func(n *simbatest.Node) (string, error) {
		out, err := n.Exec(ctx, "redis-cli", "-p", strconv.Itoa(n.Port()), "cluster", "myid")
		return strings.TrimSpace(out), err
	}
	fid, err := id(from)
	if err != nil {
		return err
	}
	tid, err := id(to)
	if err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: from.Addr})
	defer c.Close()
	n, err := countSlots(ctx, c, fid)
	if err != nil {
		return err
	}
	if n == 0 {
		// Never a silent no-op: the rotation always moves from a node that
		// has slots, so none means the ids were misread.
		return fmt.Errorf("reshard: node %s (%q) owns no slot", from.Addr, fid)
	}
	r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: from.Addr, T: faultcheck.Now(), Reason: "reshard"})
	_, err = from.Exec(ctx, "redis-cli", "--cluster", "reshard", from.Addr, "--cluster-from", fid, "--cluster-to", tid,
		"--cluster-slots", strconv.Itoa(max(1, n/2)), "--cluster-yes")
	return err
}

func countSlots(ctx context.Context, c *redis.Client, id string) (int, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range shards {
		for _, nd := range s.Nodes {
			if nd.ID == id && nd.Role == "master" {
				for _, sl := range s.Slots {
					n += int(sl.End-sl.Start) + 1
				}
			}
		}
	}
	return n, nil
}

func faultDuration(t *testing.T) time.Duration {
	d := 40 * time.Second
	if v := os.Getenv("SIMBA_FAULT_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SIMBA_FAULT_DURATION: %v", err)
		}
	}
	return d
}

// newRig starts the servers of one backend and three workers, each
// dialing through its own proxies when the backend allows it.
func newRig(t *testing.T, name string, setup func(t *testing.T, r *rig) ([]string, bool), extra ...[]string) *rig {
	bin, err := buildWorker()
	if err != nil {
		t.Fatal(err)
	}
	kind := name
	switch name {
	case "zookeeper-ensemble", "zookeeper-stall":
		kind = "zookeeper"
	case "redis-sentinel-lagging":
		kind = "redis-sentinel"
	case "redis-failback":
		kind = "redis"
	case "redis-cluster-takeover":
		kind = "redis-cluster"
	case "etcd-cluster":
		kind = "etcd"
	}
	r := &rig{t: t, bin: bin, kind: kind, ns: fmt.Sprintf("ch%d", rand.Uint32N(1e9)), dir: t.TempDir(),
		faults: append([]fault(nil), workerFaults...)}
	if r.ctl, err = os.Create(filepath.Join(r.dir, "controller.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.ctl.Close() })
	addrs, proxied := setup(t, r)
	if proxied {
		r.faults = append(r.faults, linkFaults...)
	}
	for i := range 3 {
		w := &worker{id: fmt.Sprintf("w%d", i+1)}
		if i < len(extra) {
			w.extra = extra[i]
		}
		var dial []string
		for _, a := range addrs {
			if !proxied {
				dial = append(dial, a)
				continue
			}
			p, err := tcpproxy.New(a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			w.proxy = append(w.proxy, p)
			dial = append(dial, p.Addr())
		}
		w.addr = strings.Join(dial, ",")
		if kind == "postgres" {
			w.addr = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", dial[0])
		}
		if kind == "mysql" {
			w.addr = fmt.Sprintf("root@tcp(%s)/test?timeout=2s&readTimeout=2s&writeTimeout=2s", dial[0])
		}
		r.workers = append(r.workers, w)
	}
	t.Cleanup(r.stopAll)
	return r
}

// keepLogs copies the run's logs (every worker's and the controller's, and
// the workers' standard error) out
// of the test's temporary directory, which is removed when the test ends,
// so that a violation can be traced act by act.
func (r *rig) keepLogs() {
	dir, err := os.MkdirTemp("", "simba-chaos-"+r.kind+"-")
	if err != nil {
		r.t.Logf("logs not kept: %v", err)
		return
	}
	paths, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
	stderr, _ := filepath.Glob(filepath.Join(r.dir, "*.stderr")) // the workers' warnings
	for _, p := range append(paths, stderr...) {
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644)
		}
		if err != nil {
			r.t.Logf("log %s not kept: %v", p, err)
		}
	}
	r.t.Logf("the run's logs are kept in %s", dir)
}

// check reads every log and runs the checker.
func (r *rig) check() faultcheck.Report {
	paths, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
	es, err := faultcheck.ReadFiles(paths...)
	if err != nil {
		r.t.Fatal(err)
	}
	return faultcheck.Check(es)
}

// TestFaults is the CI slice (and, long, `make chaos`): every backend in
// parallel, faults round-robin in shuffled order for SIMBA_FAULT_DURATION.
func TestFaults(t *testing.T) {
	d := faultDuration(t)
	var mu sync.Mutex
	results := map[string]faultcheck.Report{}
	t.Run("backends", func(t *testing.T) {
		for _, st := range setups {
			if !selected(st.name) {
				continue
			}
			t.Run(st.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t, st.name, st.setup)
				for _, w := range r.workers {
					r.start(w)
				}
				ctx, cancel := context.WithTimeout(t.Context(), d+time.Minute)
				defer cancel()
				if r.waitLeader(ctx, 60*time.Second) == nil {
					t.Fatal("no leader within 60s")
				}
				end := time.Now().Add(d)
				prev := "start"
				for i := 0; time.Now().Before(end); i++ {
					if i%len(r.faults) == 0 {
						rand.Shuffle(len(r.faults), func(a, b int) { r.faults[a], r.faults[b] = r.faults[b], r.faults[a] })
					}
					f := r.faults[i%len(r.faults)]
					start := time.Now()
					if err := f.apply(ctx, r); err != nil {
						t.Errorf("fault %s (after %s): %v", f.name, prev, err)
					}
					if d := time.Since(start); d > 20*time.Second {
						t.Logf("fault %s took %v (after %s)", f.name, d.Round(time.Second), prev)
					}
					prev = f.name
					// Let it settle: a failover takes about a lease.
					sleep(ctx, leases(2.5, 3.5))
				}
				r.stopAll()
				rep := r.check()
				mu.Lock()
				results[st.name] = rep
				mu.Unlock()
				p50, mx, n := rep.Percentile(50)
				t.Logf("%s: %d acts, %d elections, faults %v, %d failovers p50 %v max %v (lease %v), %d violations",
					st.name, rep.Acts, rep.Elections, rep.Faults, n, p50, mx, faultLease, len(rep.Violations))
				var each []string
				for _, f := range rep.Failovers {
					if !f.Kept {
						each = append(each, fmt.Sprintf("%s %.2f", f.Fault, float64(f.D)/float64(faultLease)))
					}
				}
				t.Logf("%s: failover after each fault, in leases: %s", st.name, strings.Join(each, ", "))
				t.Logf("%s: terms kept through the fault: %s", st.name, keptCounts(rep))
				for _, v := range rep.Violations {
					t.Errorf("violation: %s", v)
				}
				if len(rep.Violations) > 0 || os.Getenv("SIMBA_FAULT_KEEP_LOGS") != "" {
					r.keepLogs()
				}
				if rep.Acts == 0 {
					t.Error("no act was logged: the workers never led")
				}
			})
		}
	})
	rep := report(d, results)
	t.Logf("report:\n%s", rep)
	if path := os.Getenv("SIMBA_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(rep), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// keptCounts says, per fault kind, after how many of its faults the
// leader's term went on (no newer token acted before the next fault).
func keptCounts(rep faultcheck.Report) string {
	kept, all := map[string]int{}, map[string]int{}
	for _, f := range rep.Failovers {
		all[f.Fault]++
		if f.Kept {
			kept[f.Fault]++
		}
	}
	var out []string
	for k, n := range all {
		out = append(out, fmt.Sprintf("%s %d of %d", k, kept[k], n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// report is the run's docs/reliability.md: the selected deployments only.
func report(d time.Duration, results map[string]faultcheck.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Reliability: real-process fault runs\n\n")
	fmt.Fprintf(&b, "Written by `make chaos` (integration/faults_test.go, `SIMBA_FAULT_DURATION=%v` per backend, all backends in parallel on one 2-core machine), %s. ", d, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Three worker processes per backend contend for one election (lease %v, renewal %v); acts are checked by integration/faultcheck on CLOCK_MONOTONIC. ", faultLease, faultLease*3/10)
	fmt.Fprintf(&b, "Failover: from the fault to the first act of a newer token (faults after which the leader kept its term are not counted). Data-loss faults on Redis: %v (the SQL wipe, ZooKeeper's root delete and etcd's prefix delete always run).\n\n", dataLoss())
	fmt.Fprintf(&b, "| backend | faults by kind | acts checked | elections | violations | failovers | p50 | max | p50 / lease |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range setups {
		if !selected(st.name) {
			continue
		}
		rep, ok := results[st.name]
		if !ok {
			fmt.Fprintf(&b, "| %s | (did not finish) | | | | | | | |\n", st.name)
			continue
		}
		var kinds []string
		for k, n := range rep.Faults {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(kinds)
		p50, mx, n := rep.Percentile(50)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %v | %v | %.2f |\n", st.name, strings.Join(kinds, ", "), rep.Acts, rep.Elections,
			len(rep.Violations), n, p50.Round(time.Millisecond), mx.Round(time.Millisecond), float64(p50)/float64(faultLease))
	}
	for _, st := range setups {
		rep := results[st.name]
		if len(rep.Violations) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## Violations on %s (first 10)\n\n", st.name)
		for i, v := range rep.Violations {
			if i == 10 {
				break
			}
			fmt.Fprintf(&b, "- %s\n", v)
		}
	}
	// The deployments whose stalls the leader's term should survive.
	for _, name := range []string{"zookeeper-stall", "etcd-cluster"} {
		if rep, ok := results[name]; ok {
			fmt.Fprintf(&b, "\n%s, terms kept through each fault kind: %s.\n", name, keptCounts(rep))
		}
	}
	return b.String()
}

// TestFaultCheckerCatches shows the checker able to fail on real
// processes: a worker that keeps acting after revocation, and one that
// claims ten times its validity, each paused past its lease while a
// correct worker takes over, must produce violations.
func TestFaultCheckerCatches(t *testing.T) {
	for _, bad := range []string{"late", "overclaim"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "redis", func(t *testing.T, r *rig) ([]string, bool) {
				return simbatest.Redis(t, simbatest.WithNamespace(r.ns)).Addrs(), false
			}, []string{"-misbehave", bad})
			ctx := t.Context()
			r.start(r.workers[0])
			if w := r.waitLeader(ctx, 30*time.Second); w != r.workers[0] {
				t.Fatalf("the misbehaving worker does not lead first (leader %v)", w)
			}
			sleep(ctx, faultLease/2) // a few acts
			r.start(r.workers[1])
			if err := r.pauseLeader(ctx, 2*faultLease); err != nil {
				t.Fatal(err)
			}
			sleep(ctx, 3*faultLease) // the late acts, and the new leader's
			r.stopAll()
			rep := r.check()
			if len(rep.Violations) == 0 {
				t.Fatalf("no violation found for a %q worker (%d acts, %d elections)", bad, rep.Acts, rep.Elections)
			}
			t.Logf("%q: %d violations, first: %s", bad, len(rep.Violations), rep.Violations[0])
		})
	}
}
