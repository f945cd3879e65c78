package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// redisURL is a fresh, initialised namespace on the shared Redis.
func redisURL(t *testing.T) string {
	t.Helper()
	v := os.Getenv("SIMBA_REDIS_ADDR")
	if v == "" {
		t.Fatal("SIMBA_REDIS_ADDR is not set: run `make services` and `. .services/env`")
	}
	url := fmt.Sprintf("redis://%s?namespace=cli%d", v, time.Now().UnixNano()%1_000_000_000)
	if r := simba(t, url, "init"); r.code != 0 { // a new namespace (ADR 0130)
		t.Fatalf("simba init: exit %d: %s", r.code, r.stderr)
	}
	return url
}

// aliveScript, run by `sh -c aliveScript PID...` under the lock another
// process took, prints "alive PID" for each PID that still runs (a zombie
// has ended) and then "checked".
const aliveScript = `for p in "$0" "$@"; do
  if [ -e /proc/$p ] && [ "$(cut -d' ' -f3 /proc/$p/stat)" != Z ]; then echo "alive $p"; fi
done
echo checked`

// takeOver runs `exec --lock name -n` until it gets the lock, and checks,
// while holding it, that none of pids still runs: the previous holder's
// command must be gone before anyone else holds the lock.
func takeOver(t *testing.T, url, name string, pids ...string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		r := simba(t, url, append([]string{"exec", "--lock", name, "-n", "--", "sh", "-c", aliveScript}, pids...)...)
		switch {
		case r.code == 0:
			if !strings.HasSuffix(r.stdout, "checked\n") || strings.Contains(r.stdout, "alive") {
				t.Fatalf("another process got %q while the first holder's command ran: %q (pids %v)", name, r.stdout, pids)
			}
			return
		case r.code != 75 || time.Now().After(deadline):
			t.Fatalf("taking %q over: code %d (%s)", name, r.code, r.stderr)
		}
	}
}

// TestExecCommandDiesWithSimba: kill -9 of `simba exec` stops its command
// and what the command started (its process group) before another process
// gets the lock, with --lock and --elect (issue 22).
func TestExecCommandDiesWithSimba(t *testing.T) {
	for _, mode := range []string{"--lock", "--elect"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			url := redisURL(t)
			h := start(t, url, "--lease", "2s", "exec", mode, "job", "--", "sh", "-c", `sleep 1000 & echo "ready $$ $!"; wait`)
			f := strings.Fields(h.line(t))
			if len(f) != 3 {
				t.Fatalf("want ready SHELL SLEEP, got %q", f)
			}
			_ = h.cmd.Process.Kill()
			takeOver(t, url, "job", f[1], f[2])
		})
	}
}

// TestExecFrozenSimbaStopsNothingLate: with simba frozen (SIGSTOP) its
// command, which ignores SIGTERM, is killed no later than the term's local
// deadline, the last one published in SIMBA_LEASE_DEADLINE_FILE, and before
// another process gets the lock; the deadline it got at start
// (SIMBA_LEASE_DEADLINE_MS) is within one lease (issue 22).
func TestExecFrozenSimbaStopsNothingLate(t *testing.T) {
	url := redisURL(t)
	const lease = 3 * time.Second
	before := time.Now()
	h := start(t, url, "--lease", lease.String(), "exec", "--lock", "job", "--grace", "1h", "--", "sh", "-c",
		`trap '' TERM; echo "ready $$ $SIMBA_LEASE_DEADLINE_MS"; while :; do echo "tick $(date +%s%3N) $(cat "$SIMBA_LEASE_DEADLINE_FILE")"; sleep 0.05; done`)
	f := append(strings.Fields(h.line(t)), "", "")
	var (
		mu    sync.Mutex
		ticks []string
	)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for l := range h.lines {
			mu.Lock()
			ticks = append(ticks, l)
			mu.Unlock()
		}
	}()
	// Freeze simba once a renewal has moved the file's deadline on (or,
	// without one, after two leases: the checks below then fail).
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(ticks)
		last := ""
		if n > 0 {
			last = ticks[n-1]
		}
		mu.Unlock()
		if fs := strings.Fields(last); len(fs) == 3 && fs[2] != f[2] && f[2] != "" {
			break
		}
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	takeOver(t, url, "job", f[1])
	if ms, err := strconv.ParseInt(f[2], 10, 64); err != nil || ms <= before.UnixMilli() || ms > time.Now().Add(lease).UnixMilli() {
		t.Fatalf("SIMBA_LEASE_DEADLINE_MS=%q: want epoch milliseconds within one lease (%v) from the start", f[2], lease)
	}
	mu.Lock()
	seen := append([]string(nil), ticks...)
	mu.Unlock()
	if len(seen) < 5 {
		t.Fatalf("the command printed only %q", seen)
	}
	// Scheduling latency: the watchdog's timer and the shell's date run
	// on a loaded machine.
	const slack = 250
	moved := false
	for _, l := range seen {
		var now, dl int64
		if _, err := fmt.Sscanf(l, "tick %d %d", &now, &dl); err != nil {
			t.Fatalf("bad line %q: %v (no SIMBA_LEASE_DEADLINE_FILE?)", l, err)
		}
		if now > dl+slack {
			t.Fatalf("the command ran at %d, %d ms past the deadline it was given (%d): %q", now, now-dl, dl, seen)
		}
		moved = moved || strconv.FormatInt(dl, 10) != f[2]
	}
	if !moved {
		t.Fatalf("the deadline file never moved past the first deadline %s: %q", f[2], seen)
	}
	_ = h.cmd.Process.Signal(syscall.SIGCONT)
	if c := h.exit(t); c != 76 {
		t.Fatalf("a thawed holder whose command was killed at its deadline exited %d, want 76", c)
	}
	<-collected
}

// TestExecStopsWhatTheCommandLeftBehind: a background job of the command
// does not outlive the lock: it is stopped when the command exits, before
// simba releases the lock.
func TestExecStopsWhatTheCommandLeftBehind(t *testing.T) {
	url := redisURL(t)
	r := simba(t, url, "exec", "--lock", "job", "--", "sh", "-c", `sleep 1000 >/dev/null 2>&1 & echo "$!"`)
	if r.code != 0 {
		t.Fatalf("exec: code %d (%s)", r.code, r.stderr)
	}
	takeOver(t, url, "job", strings.TrimSpace(r.stdout))
}

// TestExecCommandDiesWithSimbasGroup: kill -9 of simba's whole process
// group (a supervisor killing a service's group) stops the command before
// another process gets the lock: the watchdog, in a group of its own, is
// not in it.
func TestExecCommandDiesWithSimbasGroup(t *testing.T) {
	url := redisURL(t)
	cmd, pids := startGrouped(t, url, `echo "ready $$"; while :; do sleep 0.05; done`)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	takeOver(t, url, "job", pids[0])
}

// TestExecCommandDiesWithTheWatchdog: with simba frozen, kill -9 of the
// watchdog leaves nobody to signal the command: on Linux the kernel kills
// it (its parent-death signal).
func TestExecCommandDiesWithTheWatchdog(t *testing.T) {
	url := redisURL(t)
	cmd, pids := startGrouped(t, url, `echo "ready $$ $PPID"; while :; do sleep 0.05; done`)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wd, _ := strconv.Atoi(pids[1])
	if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(pids[0])
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // not left behind by a failed test
			t.Fatalf("the command %d runs on 5 s after its watchdog %d was killed", pid, wd)
		}
	}
}

// TestExecFrozenWatchdog: with the watchdog frozen (SIGSTOP of its pid
// alone), simba stops the command itself once it has lost the term: it
// kills the command's group a little after the watchdog should have, then
// the watchdog, and exits 76.
func TestExecFrozenWatchdog(t *testing.T) {
	url := redisURL(t)
	cmd, pids := startGrouped(t, url, `echo "ready $$ $PPID"; while :; do sleep 0.05; done`)
	pid, _ := strconv.Atoi(pids[0])
	wd, _ := strconv.Atoi(pids[1])
	t.Cleanup(func() { _ = syscall.Kill(wd, syscall.SIGKILL) })
	if err := syscall.Kill(wd, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// simba frozen too until another process has taken the lock, so that
	// it finds its term lost when it runs again.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		r := simba(t, url, "exec", "--lock", "job", "-n", "--", "true")
		if r.code == 0 {
			break
		}
		if r.code != 75 || time.Now().After(deadline) {
			t.Fatalf("taking over: code %d (%s)", r.code, r.stderr)
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for syscall.Kill(pid, 0) == nil {
		if time.Since(thawed) > 5*time.Second {
			_ = syscall.Kill(pid, syscall.SIGKILL) // not left behind by a failed test
			t.Fatalf("the command runs on %v after simba, which lost its term, runs again beside a frozen watchdog", time.Since(thawed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 76 {
			t.Fatalf("simba exited with %v, want 76", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("simba did not exit 10 s after it stopped the command")
	}
}

// startGrouped starts simba exec --lock job in a process group of its own
// with the shell script, and returns it with the fields after "ready" of
// the script's first line.
func startGrouped(t *testing.T, url, script string) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(binary(t), "--backend", url, "--lease", "2s", "exec", "--lock", "job", "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, to signal
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_, _ = cmd.Process.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 2 || f[0] != "ready" {
		t.Fatalf("want ready PID..., got %q (%v)", line, err)
	}
	return cmd, f[1:]
}

// TestJSONTokensAreStrings: `leases --json` and `leader --json` write the
// token as a string, which a browser or jq reads exactly whatever its size
// (ADR 0196).
func TestJSONTokensAreStrings(t *testing.T) {
	url := redisURL(t)
	h := start(t, url, "exec", "--lock", "job", "--", "sh", "-c", `echo "ready $SIMBA_FENCING_TOKEN"; exec sleep 60`)
	held := strconv.FormatUint(token(t, h.line(t)), 10)
	for _, args := range [][]string{{"leader", "job", "--json"}, {"leases", "--json"}} {
		r := simba(t, url, args...)
		if r.code != 0 || !strings.Contains(r.stdout, `"token":"`+held+`"`) {
			t.Fatalf("simba %v: code %d, %q; want the token %s as a JSON string", args, r.code, r.stdout, held)
		}
	}
}

// daemonScript starts a daemon that leaves the command's process group
// and session (setsid, as a double-forking daemon does), prints "ready
// SHELL DAEMON" and then runs on for as long as $1 says ("exit" or "wait").
const daemonScript = `( setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo "ready $$ $!" )
if [ "$1" = wait ]; then sleep 1000; fi`

// TestExecStopsADaemonThatLeftTheGroup: a daemon the command started that
// called setsid() is out of the command's process group, but not out of
// the watchdog's reach (a child subreaper): it is stopped before the lock
// is released, whether the command exited by itself or simba was killed.
func TestExecStopsADaemonThatLeftTheGroup(t *testing.T) {
	t.Run("exited", func(t *testing.T) {
		t.Parallel()
		url := redisURL(t)
		r := simba(t, url, "exec", "--lock", "job", "--", "sh", "-c", daemonScript, "sh", "exit")
		f := strings.Fields(r.stdout)
		if r.code != 0 || len(f) != 3 {
			t.Fatalf("exec: code %d, stdout %q (%s)", r.code, r.stdout, r.stderr)
		}
		takeOver(t, url, "job", f[2])
	})
	t.Run("killed", func(t *testing.T) {
		t.Parallel()
		url := redisURL(t)
		h := start(t, url, "--lease", "2s", "exec", "--lock", "job", "--", "sh", "-c", daemonScript, "sh", "wait")
		f := strings.Fields(h.line(t))
		if len(f) != 3 {
			t.Fatalf("want ready SHELL DAEMON, got %q", f)
		}
		_ = h.cmd.Process.Kill()
		takeOver(t, url, "job", f[1], f[2])
	})
}

// TestExecSIGHUP: SIGHUP (the terminal closed, a supervisor's reload) is
// an interruption like SIGINT and SIGTERM: simba stops its command, gives
// the lock up at once and exits 130, rather than dying with the lock held
// until its lease expires.
func TestExecSIGHUP(t *testing.T) {
	url := redisURL(t)
	h := start(t, url, "--lease", "1m", "exec", "--lock", "job", "--", "sh", "-c", `echo ready; exec sleep 1000`)
	if l := h.line(t); l != "ready" {
		t.Fatalf("got %q", l)
	}
	if err := h.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if c := h.exit(t); c != exitInterrupted {
		t.Fatalf("simba exec after SIGHUP: exit %d, want %d", c, exitInterrupted)
	}
	if r := simba(t, url, "exec", "--lock", "job", "-n", "--", "true"); r.code != 0 {
		t.Fatalf("the lock was not given up after SIGHUP: exit %d (%s)", r.code, r.stderr)
	}
}

// TestExecExitCodes: the shell's conventions: a command not found is 127,
// one found that cannot run 126, a command's own code passes through, and
// a command killed by a signal is 128+N.
func TestExecExitCodes(t *testing.T) {
	url := redisURL(t)
	for _, c := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"/nonexistent/simba-test-command"}, 127},
		{[]string{"simba-test-no-such-command"}, 127},
		{[]string{"/dev/null"}, 126},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "kill -INT $$"}, 130},
		{[]string{"sh", "-c", "kill -KILL $$"}, 137},
	} {
		if r := simba(t, url, append([]string{"exec", "--lock", "codes", "--"}, c.cmd...)...); r.code != c.want {
			t.Errorf("exec %q: exit %d, want %d (%s)", c.cmd, r.code, c.want, r.stderr)
		}
	}
}

// TestExecFrozenSimbaResumes: simba frozen past its deadline, the watchdog
// stops the command and reports; simba, continued, reads that report and
// neither says the watchdog failed nor signals the command's process group,
// which is gone (its id may be another group's by then). Repeated: which
// of the report and simba's own timer it sees first is a race.
func TestExecFrozenSimbaResumes(t *testing.T) {
	url := redisURL(t)
	for i := range 4 {
		cmd := exec.Command(binary(t), "--backend", url, "--lease", "1s", "exec", "--lock", "job", "--", "sh", "-c", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if l, _ := bufio.NewReader(stdout).ReadString('\n'); l != "ready\n" {
			t.Fatalf("got %q", l)
		}
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(2500 * time.Millisecond) // past the 1 s lease's deadline
		_ = cmd.Process.Signal(syscall.SIGCONT)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
			t.Fatalf("run %d: %v, want exit %d (%s)", i, err, exitLost, stderr.String())
		}
		if strings.Contains(stderr.String(), "did not stop the command in time") {
			t.Fatalf("run %d: simba said the watchdog failed, and signalled a process group that was gone: %s", i, stderr.String())
		}
	}
}
