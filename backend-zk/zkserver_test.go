package zksimba_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A zkServer is a private ZooKeeper server a failure test starts, kills or
// pauses, so that the shared servers of `make services` stay healthy.
type zkServer struct {
	t      testing.TB
	id     int
	port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// testTick is the tickTime of private servers: minSessionTimeout is two
// ticks, and the leader expires sessions on tick boundaries.
const testTick = 200 * time.Millisecond

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ls := make([]net.Listener, n)
	ports := make([]int, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startZK starts n private servers (n = 1: standalone; n = 3: an
// ensemble) and waits until every one serves. extra lines of zoo.cfg
// override the defaults (the last value of a key wins).
func startZK(t testing.TB, n int, extra ...string) []*zkServer {
	t.Helper()
	cp := os.Getenv("SIMBA_ZK_CLASSPATH")
	if cp == "" {
		t.Fatal("SIMBA_ZK_CLASSPATH is not set: run `make services` and `. .services/env` (failure tests start private ZooKeeper servers from those jars)")
	}
	ports := freePorts(t, 3*n)
	base := t.TempDir()
	var quorum strings.Builder
	if n > 1 {
		quorum.WriteString("standaloneEnabled=false\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&quorum, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	srvs := make([]*zkServer, n)
	for i := range srvs {
		dir := filepath.Join(base, fmt.Sprintf("zk%d", i+1))
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("tickTime=%d\ninitLimit=50\nsyncLimit=5\nminSessionTimeout=%d\nmaxSessionTimeout=20000\n"+
			"dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"+
			"cnxTimeout=500\npreAllocSize=4096\n%s",
			testTick.Milliseconds(), 2*testTick.Milliseconds(), filepath.Join(dir, "data"), ports[3*i], quorum.String())
		for _, l := range extra {
			cfg += l + "\n"
		}
		must(t, os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "data", "myid"), []byte(fmt.Sprint(i+1)), 0o644))
		srvs[i] = &zkServer{t: t, id: i + 1, port: ports[3*i], dir: dir}
	}
	for _, s := range srvs {
		s.start(cp)
	}
	for _, s := range srvs {
		s.waitServing(60 * time.Second)
	}
	return srvs
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (s *zkServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *zkServer) start(cp string) {
	s.t.Helper()
	log, err := os.Create(filepath.Join(s.dir, "server.log"))
	must(s.t, err)
	s.cmd = exec.Command("java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false", "-cp", cp,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	must(s.t, s.cmd.Start())
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); log.Close(); close(done) }(s.cmd, s.exited)
	s.t.Cleanup(s.kill)
}

// restart starts a killed server again with the same data.
func (s *zkServer) restart() {
	s.start(os.Getenv("SIMBA_ZK_CLASSPATH"))
}

// kill ends the server at once (SIGKILL), as a crash would.
func (s *zkServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// pause stops the server process (SIGSTOP): it keeps its sockets but
// answers nothing, and its clock-driven work (session expiry) stops too.
func (s *zkServer) pause()  { must(s.t, s.cmd.Process.Signal(syscall.SIGSTOP)) }
func (s *zkServer) resume() { must(s.t, s.cmd.Process.Signal(syscall.SIGCONT)) }

// running reports whether the server process has not exited.
func (s *zkServer) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// heal brings a shared ensemble back after a test's faults: every server
// resumed or restarted, serving, with one leader.
func heal(t testing.TB, zks []*zkServer) {
	t.Helper()
	for _, z := range zks {
		if z.running() {
			_ = z.cmd.Process.Signal(syscall.SIGCONT)
		} else {
			z.restart()
		}
	}
	waitUntil(t, 60*time.Second, "the ensemble healed (one leader, the others following)", func() bool {
		leaders, followers := 0, 0
		for _, z := range zks {
			switch z.mode() {
			case "leader":
				leaders++
			case "follower":
				followers++
			}
		}
		return leaders == 1 && leaders+followers == len(zks)
	})
}

// fourLetter sends a ZooKeeper four-letter command and returns the answer.
func fourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// mode is "standalone", "leader", "follower" or "" when not serving.
func (s *zkServer) mode() string {
	out, err := fourLetter(s.addr(), "srvr")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return m
		}
	}
	return ""
}

func (s *zkServer) waitServing(timeout time.Duration) {
	s.t.Helper()
	waitUntil(s.t, timeout, fmt.Sprintf("zookeeper %d on %s serving", s.id, s.addr()), func() bool {
		return s.mode() != ""
	})
}

// waitUntil polls cond on a ticker until it holds, failing t after
// timeout. Only for states of outside processes, which send no events.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-limit.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func addrs(srvs []*zkServer) []string {
	out := make([]string, len(srvs))
	for i, s := range srvs {
		out[i] = s.addr()
	}
	return out
}

func leader(t testing.TB, srvs []*zkServer) *zkServer {
	t.Helper()
	var l *zkServer
	waitUntil(t, 30*time.Second, "an ensemble leader", func() bool {
		for _, s := range srvs {
			if s.mode() == "leader" {
				l = s
				return true
			}
		}
		return false
	})
	return l
}
