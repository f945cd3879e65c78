package redissimba_test

import (
	"bufio"
	"fmt"
	"io"
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
)

// server is a private redis-server started by a test on a spare loopback
// port, without persistence, so the test can pause, kill and restart it.
type server struct {
	t     testing.TB
	port  int
	dir   string
	args  []string // redis-server arguments before the common ones
	ready string   // the log line that says it is ready
	bin   string   // the executable: redis-server unless set
	cmd   *exec.Cmd
}

// freePort finds a spare loopback port by listening on :0 and closing.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed (scripts/services.sh installs it): %v", err)
	}
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), ready: "Ready to accept connections", args: args}
	s.start()
	t.Cleanup(s.kill)
	return s
}

// startSentinel starts a Redis Sentinel on a spare port that monitors
// master under the name "m": the executable SIMBA_REDIS_SENTINEL_BIN names
// (scripts/services/redis.sh installs the redis-sentinel package and sets
// it), else redis-sentinel on the PATH, else redis-server in sentinel mode.
func startSentinel(t testing.TB, master *server) *server {
	t.Helper()
	return startSentinelOn(t, master.port, 5000)
}

// startSentinelOn is startSentinel for a master at a loopback port (a
// proxy, so that the test can cut the Sentinel off) with the given
// down-after-milliseconds.
func startSentinelOn(t testing.TB, port, downAfterMS int) *server {
	t.Helper()
	bin := os.Getenv("SIMBA_REDIS_SENTINEL_BIN")
	if bin == "" {
		if p, err := exec.LookPath("redis-sentinel"); err == nil {
			bin = p
		}
	}
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), ready: "+monitor master", bin: bin}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor m 127.0.0.1 %d 1\nsentinel down-after-milliseconds m %d\n", port, downAfterMS)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{conf, "--sentinel"}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs redis-server in the foreground and waits for the line in its
// log that says it accepts connections.
func (s *server) start() {
	s.t.Helper()
	args := append(append([]string(nil), s.args...), "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--dbfilename", "dump.rdb", "--loglevel", "notice")
	bin := s.bin
	if bin == "" {
		bin = "redis-server"
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), s.ready) {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained until exit
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.t.Fatalf("redis-server %v on port %d: no %q after 10s", s.args, s.port, s.ready)
	}
	s.cmd = cmd
}

func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

func (s *server) pause()  { s.signal(syscall.SIGSTOP) }
func (s *server) resume() { s.signal(syscall.SIGCONT) }

// kill ends the server at once, losing its data (no persistence).
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restartEmpty kills the server and starts a new one on the same port,
// like a restart without persistence.
func (s *server) restartEmpty() {
	s.t.Helper()
	s.kill()
	if err := os.Remove(filepath.Join(s.dir, "dump.rdb")); err != nil && !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
	s.start()
}

// restartFromSnapshot kills the server (kill -9: no final save) and starts
// a new one on the same port from the dump.rdb of its last SAVE, as a crash
// of a Redis persisting by RDB snapshots alone restarts.
func (s *server) restartFromSnapshot() {
	s.t.Helper()
	s.kill()
	s.start()
}

func (s *server) client(addr string) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true,
		MaxRetries:  -1, // the engine retries; a hidden retry would outlive its deadline
		DialTimeout: 500 * time.Millisecond,
	})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// proxy forwards loopback TCP to a server and can cut every connection and
// refuse new ones, then restore service: a network partition on demand.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	silent bool // connections stay open but every byte is dropped
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		drop := p.silent
		p.mu.Unlock()
		if n > 0 && !drop {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	hold := p.silent
	p.mu.Unlock()
	if hold {
		return // a silent partition carries no FIN either: close ends dst
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// setCut cuts (closing every open connection, refusing new ones) or
// restores the link.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// setSilent drops every byte both ways, closes included, while keeping
// the connections open, or forwards again: a partition no side hears of
// (no FIN, no RST), noticed only by timeouts.
func (p *proxy) setSilent(silent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = silent
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}
