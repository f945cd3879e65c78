//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the master, and the slave for
// the process under test.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = s.Close() })
	return m, s
}

// TestExecCommandReadsTheTerminal: run from an interactive terminal
// (simba in its foreground process group, as a shell starts it), the
// command can read the terminal: its group is given the foreground, where
// a background group would be stopped by SIGTTIN and hang until the lock
// was given up.
func TestExecCommandReadsTheTerminal(t *testing.T) {
	url := redisURL(t)
	master, slave := openPTY(t)
	cmd := exec.Command(binary(t), "--backend", url, "exec", "--lock", "tty", "--", "sh", "-c", `echo ready; read x; echo "got $x"`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own with the terminal as its controlling one: simba
	// is then in the terminal's foreground group, as under a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	out := make(chan string, 1)
	go func() {
		var buf bytes.Buffer
		b := make([]byte, 1024)
		sent := false
		for {
			n, err := master.Read(b)
			buf.Write(b[:n])
			if !sent && strings.Contains(buf.String(), "ready") {
				_, _ = master.Write([]byte("hello\n"))
				sent = true
			}
			if strings.Contains(buf.String(), "got hello") || err != nil {
				out <- buf.String()
				return
			}
		}
	}()
	select {
	case s := <-out:
		if !strings.Contains(s, "got hello") {
			t.Fatalf("the command did not read the terminal: %q", s)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the command did not read the terminal within 15 s (stopped by SIGTTIN in a background group?)")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("exec exited %d", ee.ExitCode())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("exec did not exit after its command")
	}
}

// TestExecCtrlZ: Ctrl-Z in the terminal stops the command (its group has
// the foreground); the watchdog hands the terminal back and stops simba's
// group too, so that the shell sees its job stopped (and gets the terminal
// back). A stopped simba renews nothing to the watchdog: the command is
// stopped by the deadline, and simba, continued with fg, reports the term
// over (76).
func TestExecCtrlZ(t *testing.T) {
	url := redisURL(t)
	master, slave := openPTY(t)
	// A job-control shell as the session leader starts simba as a
	// foreground job, as an interactive shell does.
	cmd := exec.Command("sh", "-c", `set -m
"$0" --backend "$1" --lease 2s exec --lock tty -- sh -c 'echo ready; sleep 1000'
echo "stopped $?"; sleep 3; fg >/dev/null; echo "simba $?"`, binary(t), url)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	out := make(chan string, 1)
	go func() {
		var buf bytes.Buffer
		b := make([]byte, 1024)
		sent := false
		for {
			n, err := master.Read(b)
			buf.Write(b[:n])
			if !sent && strings.Contains(buf.String(), "ready") {
				_, _ = master.Write([]byte{0x1a}) // Ctrl-Z (VSUSP)
				sent = true
			}
			if strings.Contains(buf.String(), "simba ") && strings.HasSuffix(buf.String(), "\n") || err != nil {
				out <- buf.String()
				return
			}
		}
	}()
	select {
	case s := <-out:
		if !strings.Contains(s, "stopped 14") || !strings.Contains(s, "simba 76") {
			t.Fatalf("want simba stopped by Ctrl-Z, then exit 76 after fg: %q", s)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Ctrl-Z: the shell never got its stopped job back (simba not stopped, the command stopped under a live lock?)")
	}
}
