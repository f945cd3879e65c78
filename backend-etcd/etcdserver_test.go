package etcdsimba_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// privateCluster is etcd members of this test's own, on free loopback
// ports, for the faults the shared servers must never see (kill, stop,
// restore). Fast elections (50 ms heartbeats, 500 ms election timeout)
// keep the tests short; the minimum lease TTL is then 1 s.
type privateCluster struct {
	t       *testing.T
	dir     string
	members []*privateMember
	// logLevel is each member's --log-level (its log is <dir>/<name>.log);
	// "warn" unless a test wants more.
	logLevel string
	// extra flags given to every member.
	extra []string
	// bin is the etcd binary: $SIMBA_ETCD_BIN, or etcd on the PATH
	// (Debian's 3.4.23, installed by scripts/services.sh).
	bin string
}

type privateMember struct {
	name         string
	client, peer int
	cmd          *exec.Cmd
	stopped      bool
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrivate starts an n-member cluster and waits until it is healthy.
func startPrivate(t *testing.T, n int) *privateCluster {
	t.Helper()
	return startPrivateWith(t, n, "warn")
}

// startPrivateWith is startPrivate with each member's log level and extra
// flags.
func startPrivateWith(t *testing.T, n int, logLevel string, extra ...string) *privateCluster {
	t.Helper()
	bin := os.Getenv("SIMBA_ETCD_BIN")
	if bin == "" {
		bin = "etcd"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s is not installed: run `make services` (it installs Debian's etcd-server), or set SIMBA_ETCD_BIN to another etcd: %v", bin, err)
	}
	c := &privateCluster{t: t, dir: t.TempDir(), logLevel: logLevel, extra: extra, bin: bin}
	for i := range n {
		c.members = append(c.members, &privateMember{name: fmt.Sprintf("m%d", i), client: freePort(t), peer: freePort(t)})
	}
	for i := range c.members {
		c.start(i)
	}
	c.waitHealthy()
	t.Cleanup(func() {
		for i := range c.members {
			c.kill(i)
		}
	})
	return c
}

func (c *privateCluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, fmt.Sprintf("%s=http://127.0.0.1:%d", m.name, m.peer))
	}
	return strings.Join(parts, ",")
}

func (c *privateCluster) dataDir(i int) string { return filepath.Join(c.dir, c.members[i].name) }

// start starts member i (again) from its data directory.
func (c *privateCluster) start(i int) {
	c.t.Helper()
	m := c.members[i]
	log, err := os.OpenFile(filepath.Join(c.dir, m.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := []string{"--name", m.name, "--data-dir", c.dataDir(i),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", m.client),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", m.client),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.peer),
		"--initial-cluster", c.initialCluster(), "--initial-cluster-token", "simba-private",
		"--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", c.logLevel}
	cmd := exec.Command(c.bin, append(args, c.extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd %s: %v", m.name, err)
	}
	_ = log.Close()
	m.cmd, m.stopped = cmd, false
}

// kill ends member i at once (SIGKILL), as a crash.
func (c *privateCluster) kill(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGCONT)
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	m.cmd = nil
}

// stall stops member i (SIGSTOP) without closing its sockets; resume
// continues it.
func (c *privateCluster) stall(i int) {
	c.members[i].stopped = true
	_ = c.members[i].cmd.Process.Signal(syscall.SIGSTOP)
}

func (c *privateCluster) resume(i int) {
	c.members[i].stopped = false
	_ = c.members[i].cmd.Process.Signal(syscall.SIGCONT)
}

func (c *privateCluster) endpoint(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.members[i].client)
}

func (c *privateCluster) endpoints() []string {
	var eps []string
	for i := range c.members {
		eps = append(eps, c.endpoint(i))
	}
	return eps
}

// waitHealthy waits until every running member answers a linearizable read.
func (c *privateCluster) waitHealthy() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i, m := range c.members {
		if m.cmd == nil || m.stopped {
			continue
		}
		cli := c.memberClient(i)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cli.Get(ctx, "health")
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("etcd %s not healthy after 30s: %v (log in %s)", m.name, err, c.dir)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cli.Close()
	}
}

func (c *privateCluster) memberClient(i int) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.endpoint(i)}, DialTimeout: 2 * time.Second, Logger: zapNop})
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

// leader is the index of the member that leads, asked of member ask.
func (c *privateCluster) leader(ask int) int {
	c.t.Helper()
	cli := c.memberClient(ask)
	defer cli.Close()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, c.endpoint(ask))
		cancel()
		if err == nil && st.Leader != 0 {
			for i := range c.members {
				if c.members[i].cmd == nil || c.members[i].stopped {
					continue
				}
				mc := c.memberClient(i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ms, err := mc.Status(ctx, c.endpoint(i))
				cancel()
				_ = mc.Close()
				if err == nil && ms.Header.MemberId == st.Leader {
					return i
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no leader found")
	return -1
}

// snapshot saves a snapshot of member i to a file and returns its path.
func (c *privateCluster) snapshot(i int) string {
	c.t.Helper()
	path := filepath.Join(c.dir, fmt.Sprintf("snap-%d.db", time.Now().UnixNano()))
	out, err := exec.Command("etcdctl", "--endpoints", c.endpoint(i), "snapshot", "save", path).CombinedOutput()
	if err != nil {
		c.t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	return path
}

// restore kills every member, replaces their data with snap (etcdctl
// snapshot restore, the documented disaster recovery) and starts them.
func (c *privateCluster) restore(snap string) {
	c.t.Helper()
	for i := range c.members {
		c.kill(i)
	}
	for i, m := range c.members {
		if err := os.RemoveAll(c.dataDir(i)); err != nil {
			c.t.Fatal(err)
		}
		out, err := exec.Command("etcdctl", "snapshot", "restore", snap, "--name", m.name, "--data-dir", c.dataDir(i),
			"--initial-cluster", c.initialCluster(), "--initial-cluster-token", "simba-private",
			"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.peer)).CombinedOutput()
		if err != nil {
			c.t.Fatalf("etcdctl snapshot restore: %v\n%s", err, out)
		}
	}
	for i := range c.members {
		c.start(i)
	}
	c.waitHealthy()
}

// version is the etcd version the first running member reports.
func (c *privateCluster) version() string {
	c.t.Helper()
	for i, m := range c.members {
		if m.cmd == nil || m.stopped {
			continue
		}
		cli := c.memberClient(i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, c.endpoint(i))
		cancel()
		_ = cli.Close()
		if err == nil {
			return st.Version
		}
	}
	c.t.Fatal("no member reports its version")
	return ""
}
