package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The private network: one veth pair, 10.200.75.1 on this side and
// 10.200.75.2 inside the namespace, where the private servers listen.
// Nothing is routed anywhere else: the namespace has no default route, so
// a server in it can reach only its own loopback and 10.200.75.1.
const (
	netnsName = "simba-benchpeers"
	vethHost  = "bpv0"
	vethNS    = "bpv1"
	hostAddr  = "10.200.75.1"
	nsAddr    = "10.200.75.2"
)

// Ports (this helper's range, 22750-22849): the servers' inside the
// namespace, and the delay proxy's on 127.0.0.1 (server port + 10).
const (
	portRedis = 22750 + iota
	portPostgres
	portMariaDB
	portZK
	portEtcd
	portEtcdPeer
	portEcho
)

const proxyOffset = 10

// targets are the addresses one run of a backend's cases connects to.
type targets struct {
	label    string // "loopback", "private, direct", "0.24 ms RTT", ...
	redis    string
	postgres string // URL
	mysql    string // DSN
	zk       string // comma-separated
	etcd     string // comma-separated
	private  *privateServers
}

// sharedTargets are the shared servers of scripts/services.sh.
func sharedTargets() targets {
	return targets{label: "loopback", redis: os.Getenv("SIMBA_REDIS_ADDR"), postgres: os.Getenv("SIMBA_POSTGRES_URL"),
		mysql: os.Getenv("SIMBA_MYSQL_DSN"), zk: os.Getenv("SIMBA_ZK_SERVERS"), etcd: os.Getenv("SIMBA_ETCD_ENDPOINTS")}
}

// privateTargets reach the private servers directly (host is nsAddr) or
// through the delay proxy (host is 127.0.0.1, ports + proxyOffset).
func privateTargets(p *privateServers, label string, proxied bool) targets {
	host, off := nsAddr, 0
	if proxied {
		host, off = "127.0.0.1", proxyOffset
	}
	at := func(port int) string { return net.JoinHostPort(host, strconv.Itoa(port+off)) }
	return targets{label: label, private: p,
		redis:    at(portRedis),
		postgres: "postgres://postgres@" + at(portPostgres) + "/postgres?sslmode=disable",
		mysql:    "root@tcp(" + at(portMariaDB) + ")/test",
		zk:       at(portZK),
		etcd:     at(portEtcd),
	}
}

// proxyRoutes are the listen=target pairs of the delay proxy.
func proxyRoutes() []string {
	var r []string
	for _, p := range []int{portRedis, portPostgres, portMariaDB, portZK, portEtcd, portEcho} {
		r = append(r, fmt.Sprintf("127.0.0.1:%d=%s:%d", p+proxyOffset, nsAddr, p))
	}
	return r
}

// privateServers are the servers this run started in the namespace, by
// kind; failed says why a kind could not be started.
type privateServers struct {
	lock   *os.File // flocked until stop: one run at a time
	dir    string
	procs  map[string]*exec.Cmd
	failed map[string]error
}

func run1(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetns creates the namespace and the veth pair, removing a leftover
// of an earlier run of this tool (same names) first.
func setupNetns() error {
	teardownNetns()
	steps := [][]string{
		{"ip", "netns", "add", netnsName},
		{"ip", "link", "add", vethHost, "type", "veth", "peer", "name", vethNS, "netns", netnsName},
		{"ip", "addr", "add", hostAddr + "/30", "dev", vethHost},
		{"ip", "link", "set", vethHost, "up"},
		{"ip", "-n", netnsName, "addr", "add", nsAddr + "/30", "dev", vethNS},
		{"ip", "-n", netnsName, "link", "set", vethNS, "up"},
		{"ip", "-n", netnsName, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run1(s[0], s[1:]...); err != nil {
			teardownNetns()
			return fmt.Errorf("network namespace (needs root and ip netns): %w", err)
		}
	}
	return nil
}

func teardownNetns() {
	_ = exec.Command("ip", "link", "del", vethHost).Run()
	_ = exec.Command("ip", "netns", "del", netnsName).Run()
}

// startPrivate starts the private servers of the kinds asked (redis,
// postgres, mariadb, zk, etcd) inside the namespace, each with the
// settings of its shared counterpart (fsync and synchronous commit on,
// no persistence for Redis, ZooKeeper's 200 ms tick), plus what the
// server-cost measures need (pg_stat_statements and WAL timing,
// MariaDB's performance_schema). A kind that fails is recorded in
// failed; the others go on.
func startPrivate(ctx context.Context, kinds []string) (*privateServers, error) {
	// One run at a time: a second one would take the namespace, the ports
	// and (reapLeftovers) the first one's servers.
	lock, err := os.OpenFile("/var/tmp/simba-benchpeers.lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("another benchpeers run holds /var/tmp/simba-benchpeers.lock (its private servers and namespace): %w", err)
	}
	reapLeftovers()
	if err := setupNetns(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/var/tmp", "simba-benchpeers-")
	if err != nil {
		teardownNetns()
		return nil, err
	}
	// The postgres and mysql users must reach their data directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	p := &privateServers{dir: dir, procs: map[string]*exec.Cmd{}, failed: map[string]error{}, lock: lock}
	starters := map[string]func(context.Context) error{
		"redis": p.startRedis, "postgres": p.startPostgres, "mariadb": p.startMariaDB, "zk": p.startZK, "etcd": p.startEtcd,
	}
	if err := p.startEcho(); err != nil {
		p.stop()
		return nil, err
	}
	for _, k := range kinds {
		st, ok := starters[k]
		if !ok {
			continue
		}
		if err := st(ctx); err != nil {
			p.failed[k] = err
			if c := p.procs[k]; c != nil {
				stopProc(c)
				delete(p.procs, k)
			}
		}
	}
	return p, nil
}

// inNS starts a long-running server in the namespace, its output in
// dir/<kind>.log, in a process group of its own.
func (p *privateServers) inNS(kind string, argv ...string) error {
	logf, err := os.Create(filepath.Join(p.dir, kind+".log"))
	if err != nil {
		return err
	}
	c := exec.Command("ip", append([]string{"netns", "exec", netnsName}, argv...)...)
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	p.procs[kind] = c
	go func() { _ = c.Wait(); _ = logf.Close() }()
	// Recorded, so that a run killed before its cleanup has its servers
	// ended by the next one (reapLeftovers).
	f, err := os.OpenFile(filepath.Join(p.dir, "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = fmt.Fprintln(f, c.Process.Pid)
		_ = f.Close()
	}
	return nil
}

// reapLeftovers ends the servers of an earlier run of this tool that
// was killed before its cleanup (their processes outlive the deleted
// namespace and keep its ports): by the pids it recorded, each only if
// its command line still names that run's directory or the namespace's address,
// and removes the directory.
func reapLeftovers() {
	dirs, _ := filepath.Glob("/var/tmp/simba-benchpeers-*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "pids"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 1 {
				continue
			}
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				continue
			}
			line := strings.ReplaceAll(string(cmd), "\x00", " ")
			if strings.Contains(line, d) || strings.Contains(line, nsAddr) { // redis-server retitles itself "redis-server 10.200.75.2:22750"
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(d)
	}
}

// stopProc ends one server this run started, by its process group, and
// waits (bounded) for it to go.
func stopProc(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	pid := c.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a process's exit, bounded
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

func (p *privateServers) stop() {
	for _, c := range p.procs {
		stopProc(c)
	}
	teardownNetns()
	_ = os.RemoveAll(p.dir)
	_ = p.lock.Close()
}

// pid is the process id of a kind's server (ip netns exec execs it, so
// the child's pid is the server's), 0 if not started.
func (p *privateServers) pid(kind string) int {
	if p == nil || p.procs[kind] == nil || p.procs[kind].Process == nil {
		return 0
	}
	return p.procs[kind].Process.Pid
}

func (p *privateServers) logTail(kind string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, kind+".log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	return s
}

// waitFor polls ready until it succeeds, the server's process ends, or
// 90 s pass.
func (p *privateServers) waitFor(ctx context.Context, kind string, ready func(context.Context) error) error {
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = ready(c)
		cancel()
		if err == nil {
			return nil
		}
		if pid := p.pid(kind); pid != 0 && syscall.Kill(pid, 0) != nil {
			return fmt.Errorf("private %s exited: %v; log: %s", kind, err, p.logTail(kind))
		}
		time.Sleep(200 * time.Millisecond) // polling a server's readiness, bounded
	}
	return fmt.Errorf("private %s not ready after 90 s: %v; log: %s", kind, err, p.logTail(kind))
}

func (p *privateServers) startRedis(ctx context.Context) error {
	if err := p.inNS("redis", "redis-server", "--port", strconv.Itoa(portRedis), "--bind", nsAddr, "--save", "",
		"--appendonly", "no", "--protected-mode", "no", "--dir", p.dir); err != nil {
		return err
	}
	return p.waitFor(ctx, "redis", func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(nsAddr, strconv.Itoa(portRedis))})
		defer c.Close()
		return c.Ping(ctx).Err()
	})
}

// pgBin is PostgreSQL's binary directory (Debian's layout).
func pgBin() string {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "/usr/lib/postgresql/15/bin"
}

func asUser(user string, argv ...string) []string {
	return append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"}, argv...)
}

func (p *privateServers) startPostgres(ctx context.Context) error {
	data := filepath.Join(p.dir, "pg")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	if err := run1("chown", "postgres:postgres", data); err != nil {
		return err
	}
	argv := asUser("postgres", filepath.Join(pgBin(), "initdb"), "-D", data, "-A", "trust", "-U", "postgres")
	if err := run1(argv[0], argv[1:]...); err != nil {
		return err
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(hba, "host all all %s/32 trust\n", hostAddr)
	_ = hba.Close()
	if err := p.inNS("postgres", asUser("postgres", filepath.Join(pgBin(), "postgres"), "-D", data, "-p", strconv.Itoa(portPostgres),
		"-k", data, "-c", "listen_addresses="+nsAddr, "-c", "shared_buffers=128MB", "-c", "max_connections=100",
		"-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=top",
		"-c", "track_wal_io_timing=on", "-c", "track_functions=all")...); err != nil {
		return err
	}
	url := "postgres://postgres@" + net.JoinHostPort(nsAddr, strconv.Itoa(portPostgres)) + "/postgres?sslmode=disable"
	if err := p.waitFor(ctx, "postgres", func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		return c.Ping(ctx)
	}); err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, "CREATE EXTENSION pg_stat_statements")
	return err
}

func (p *privateServers) startMariaDB(ctx context.Context) error {
	data := filepath.Join(p.dir, "my")
	if err := os.Mkdir(data, 0o755); err != nil {
		return err
	}
	if err := run1("chown", "mysql:mysql", data); err != nil {
		return err
	}
	if err := run1("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db"); err != nil {
		return err
	}
	sock := filepath.Join(data, "sock") // where the mysql user may create it
	// The shared server's settings that matter here: binary log off,
	// InnoDB flushing its log at every commit (the default).
	if err := p.inNS("mariadb", "mariadbd", "--no-defaults", "--datadir="+data, "--user=mysql",
		"--port="+strconv.Itoa(portMariaDB), "--bind-address="+nsAddr, "--socket="+sock,
		"--pid-file="+filepath.Join(data, "pid"), "--skip-log-bin", "--skip-name-resolve",
		"--innodb-buffer-pool-size=128M", "--innodb-flush-log-at-trx-commit=1",
		"--performance-schema=ON"); err != nil {
		return err
	}
	sockDSN := "root@unix(" + sock + ")/"
	if err := p.waitFor(ctx, "mariadb", func(ctx context.Context) error {
		db, err := sql.Open("mysql", sockDSN)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	}); err != nil {
		return err
	}
	db, err := sql.Open("mysql", sockDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	// root from this side of the veth pair (directly or through the proxy).
	for _, q := range []string{
		"CREATE USER 'root'@'" + hostAddr + "'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'" + hostAddr + "' WITH GRANT OPTION",
		"CREATE DATABASE test",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func (p *privateServers) startZK(ctx context.Context) error {
	data := filepath.Join(p.dir, "zk")
	if err := os.Mkdir(data, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(p.dir, "zoo.cfg")
	// The shared server's tick and session bounds (scripts/services/zookeeper.sh).
	conf := fmt.Sprintf("tickTime=200\ninitLimit=50\nsyncLimit=10\nminSessionTimeout=400\nmaxSessionTimeout=20000\n"+
		"dataDir=%s\nclientPort=%d\nclientPortAddress=%s\nmaxClientCnxns=0\nadmin.enableServer=false\n"+
		"4lw.commands.whitelist=*\npreAllocSize=4096\nsnapCount=10000\n", data, portZK, nsAddr)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	cp := os.Getenv("SIMBA_ZK_CLASSPATH")
	if cp == "" {
		cp = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
	}
	if err := p.inNS("zk", "java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg); err != nil {
		return err
	}
	addr := net.JoinHostPort(nsAddr, strconv.Itoa(portZK))
	return p.waitFor(ctx, "zk", func(ctx context.Context) error {
		conn, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			return err
		}
		defer conn.Close()
		done := make(chan error, 1)
		go func() { _, _, err := conn.Exists("/"); done <- err }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

func (p *privateServers) startEtcd(ctx context.Context) error {
	client := "http://" + net.JoinHostPort(nsAddr, strconv.Itoa(portEtcd))
	peer := "http://127.0.0.1:" + strconv.Itoa(portEtcdPeer) // the namespace's own loopback
	if err := p.inNS("etcd", "etcd", "--name", "bp", "--data-dir", filepath.Join(p.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bp="+peer, "--log-level", "warn"); err != nil {
		return err
	}
	return p.waitFor(ctx, "etcd", func(ctx context.Context) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Status(ctx, client)
		return err
	})
}

// startEcho runs this program's TCP echo server in the namespace: the
// delay proxy's round trip is measured against it before each run.
func (p *privateServers) startEcho() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := p.inNS("echo", self, "-echo", net.JoinHostPort(nsAddr, strconv.Itoa(portEcho))); err != nil {
		return err
	}
	return p.waitFor(context.Background(), "echo", func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(nsAddr, strconv.Itoa(portEcho)))
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

// serveEcho answers every line with itself, until killed.
func serveEcho(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				if _, err := c.Write(line); err != nil {
					return
				}
			}
		}()
	}
}

// procCPU is the CPU time so far of a process and all its descendants'
// threads (schedstat run time, nanoseconds): the server's own cost.
func procCPU(root int) (time.Duration, error) {
	if root == 0 {
		return 0, errors.New("no process")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			parent[pid] = pp
		}
	}
	in := func(pid int) bool {
		for n := 0; pid > 1 && n < 64; n++ {
			if pid == root {
				return true
			}
			pid = parent[pid]
		}
		return false
	}
	var total time.Duration
	for pid := range parent {
		if !in(pid) {
			continue
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				total += time.Duration(ns)
			}
		}
	}
	return total, nil
}
