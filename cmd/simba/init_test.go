package main

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freshRedis starts a private redis-server without persistence on a spare
// port: a server just started, as after a restart that lost everything.
func freshRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server (scripts/services.sh installs it): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for end := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(end) {
			t.Fatalf("redis-server on %s does not listen after 10s", addr)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestInitRefusedOnAFreshServer: `simba init` run by a deploy job right
// after a Redis restart without persistence refuses to skip the
// quarantine (exit 75, saying why and what to do) and writes nothing;
// --force, the operator's word that the namespace is new, initialises it;
// init after that is harmless.
func TestInitRefusedOnAFreshServer(t *testing.T) {
	url := "redis://" + freshRedis(t) + "?namespace=deploy"
	r := simba(t, url, "init")
	if r.code != 75 || !strings.Contains(r.stderr, "the server started") || !strings.Contains(r.stderr, "simba init --force") {
		t.Fatalf("init on a server started now: code %d, stderr %q; want 75 saying why and what to do", r.code, r.stderr)
	}
	if r := simba(t, url, "init", "--force"); r.code != 0 || r.stdout != "initialised\n" {
		t.Fatalf("init --force: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := simba(t, url, "init"); r.code != 0 || r.stdout != "initialised\n" {
		t.Fatalf("init after init --force: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestInitSizedByTheApplicationsMaxLease: Init's young-server check is
// sized by the maximum lease, so `simba init` must use the applications'
// (URL parameter max_lease, ADR 0217). With the default 30 s, a deploy job
// run 31 s after a restart without persistence created the epoch while a
// holder with a 5 minute lease from before the restart still believed.
// Here a server up for 3 s: too young for an hour's maximum lease, old
// enough for one second's.
func TestInitSizedByTheApplicationsMaxLease(t *testing.T) {
	addr := freshRedis(t)
	<-time.After(3 * time.Second) // the server's uptime, on its own clock: no event to wait on
	if r := simba(t, "redis://"+addr+"?namespace=long&max_lease=1h", "init"); r.code != 75 || !strings.Contains(r.stderr, "the server started") {
		t.Fatalf("init with max_lease=1h on a server up 3 s: code %d, stderr %q; want 75 (young)", r.code, r.stderr)
	}
	if r := simba(t, "redis://"+addr+"?namespace=short&max_lease=1s", "init"); r.code != 0 || r.stdout != "initialised\n" {
		t.Fatalf("init with max_lease=1s on a server up 3 s: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestInitSizedByTheApplicationsMaxLockDelay: Init's young-server check is
// sized by the maximum lease plus the maximum lock-delay (ADR 0246), so
// `simba init` must take the applications' WithMaxLockDelay too (URL
// parameter max_lock_delay, ADR 0281). A server up 3 s is old enough for
// a one second lease but not for a lease whose delay of an hour may still
// run: a deploy job must not create the epoch there.
func TestInitSizedByTheApplicationsMaxLockDelay(t *testing.T) {
	addr := freshRedis(t)
	<-time.After(3 * time.Second) // the server's uptime, on its own clock: no event to wait on
	if r := simba(t, "redis://"+addr+"?namespace=delayed&max_lease=1s&max_lock_delay=1h", "init"); r.code != 75 || !strings.Contains(r.stderr, "the server started") {
		t.Fatalf("init with max_lease=1s, max_lock_delay=1h on a server up 3 s: code %d, stderr %q; want 75 (young)", r.code, r.stderr)
	}
	if r := simba(t, "redis://"+addr+"?namespace=plain&max_lease=1s&max_lock_delay=0s", "init"); r.code != 0 || r.stdout != "initialised\n" {
		t.Fatalf("init with max_lease=1s, max_lock_delay=0s on a server up 3 s: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
