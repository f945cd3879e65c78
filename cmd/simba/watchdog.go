package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog is simba itself started again as `simba __watchdog ...`
// between simba and the command (docs/adr/0195-exec-watchdog.md): it is
// the command's parent, knows the term's local deadline on the system's
// monotonic clock, and stops the command's process group by that deadline
// whatever becomes of simba (killed, frozen, starved). simba feeds it the
// deadline after every renewal; it has no network and nothing to wait for
// but its pipe, the clock and the command, so it stays responsive when
// simba does not.
//
// Its file descriptors: 0-2 are passed to the command; 3 is the control
// pipe from simba, one line per message:
//
//	d NANOS   the term's local deadline (CLOCK_MONOTONIC nanoseconds) is now NANOS
//	stop      simba was interrupted: stop the command (the term is still valid)
//	lost      the term ended: stop the command; its token is no longer valid
//
// and end of file when simba has exited or died (stop the command). 4 is
// the report pipe to simba: "started PID" once the command runs, then one
// of "exit CODE WHY" (WHY: self, deadline, stop, lost, orphaned), "error
// MESSAGE" (the command could not be started), "missing MESSAGE" (it does
// not exist) or "expired" (the deadline
// had passed before the command could start).
const watchdogArg = "__watchdog"

// Why the command ended, as the watchdog reports it.
const (
	endSelf     = "self"     // it exited by itself
	endDeadline = "deadline" // the watchdog stopped it: the deadline came near with no renewal
	endStop     = "stop"     // simba asked (interrupted)
	endLost     = "lost"     // simba reported the term over
	endOrphaned = "orphaned" // simba exited or died while it ran
)

// monoNow reads CLOCK_MONOTONIC, the clock simba's deadlines are measured
// on (Go's monotonic clock on Linux) and the same for every process of the
// machine, unlike a time.Time's monotonic reading.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("simba: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// monoDeadline is the local deadline of a term with remaining time left
// as CLOCK_MONOTONIC nanoseconds. remaining must be read after this call's
// clock reading would be: callers pass a func so that the clock is read
// first, and the deadline is never later than the term's own.
func monoDeadline(remaining func() time.Duration) (int64, bool) {
	now := monoNow()
	r := remaining()
	if r <= 0 {
		return 0, false
	}
	return now + int64(r), true
}

// wallMillis converts a CLOCK_MONOTONIC deadline to Unix epoch
// milliseconds, rounded down, reading the wall clock first so that the
// result is never later than the deadline: what a shell script compares
// with `date +%s%3N`.
func wallMillis(mono int64) int64 {
	wall := time.Now().UnixNano()
	return (wall + mono - monoNow()) / int64(time.Millisecond)
}

// watchdog runs the watchdog; args are GRACE AHEAD DEADLINE -- CMD ARGS...
// (nanoseconds; AHEAD is how long before the deadline the command gets
// SIGTERM when simba is silent). It returns its exit status; what matters
// to simba is on the report pipe.
func watchdog(args []string) int {
	// The command's parent-death signal (Linux) is tied to the thread that
	// started it, not to the process: keep this goroutine on its thread,
	// never unlocked, so the signal comes only when the watchdog dies.
	runtime.LockOSThread()
	usage := func() int {
		fmt.Fprintln(os.Stderr, "simba: __watchdog is run by simba exec, not by hand")
		return exitUsage
	}
	if len(args) < 5 || args[3] != "--" {
		return usage()
	}
	var n [3]int64
	for i := range n {
		v, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil || v < 0 {
			return usage()
		}
		n[i] = v
	}
	grace, ahead, deadline := n[0], n[1], n[2]
	if _, err := unix.FcntlInt(3, unix.F_GETFD, 0); err != nil {
		return usage()
	}
	if _, err := unix.FcntlInt(4, unix.F_GETFD, 0); err != nil {
		return usage()
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	ctl, rep := os.NewFile(3, "simba-control"), os.NewFile(4, "simba-report")
	report := func(format string, a ...any) { _, _ = fmt.Fprintf(rep, format+"\n", a...) }
	// simba handles SIGINT, SIGTERM and SIGHUP and tells the watchdog
	// through its pipe. Caught, not ignored: an ignored signal would stay
	// ignored in the command.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)

	dir, err := os.MkdirTemp("", "simba-exec-")
	if err != nil {
		report("error %v", err)
		return 0
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "deadline_ms")
	publish := func(ms int64) {
		// Written then renamed: a script never reads half a number.
		tmp := file + ".tmp"
		if os.WriteFile(tmp, []byte(strconv.FormatInt(ms, 10)+"\n"), 0o644) == nil {
			_ = os.Rename(tmp, file)
		}
	}
	first := wallMillis(deadline)
	publish(first)
	if monoNow() >= deadline-ahead {
		report("expired")
		return 0
	}

	// Whatever the command starts and then leaves (a daemon that double
	// forks and calls setsid, out of the command's group) becomes the
	// watchdog's child when its parent ends, so it can be stopped too.
	subreaper()

	cmd := exec.Command(args[4], args[5:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "SIMBA_LEASE_DEADLINE_MS="+strconv.FormatInt(first, 10), "SIMBA_LEASE_DEADLINE_FILE="+file)
	// Its own process group, so that stopping it stops what it started;
	// on Linux it also dies if the watchdog does.
	cmd.SysProcAttr = commandAttr()
	// In a terminal where simba is in the foreground, the command's group
	// takes the foreground, as a shell's job would: a background group
	// that reads the terminal is stopped (SIGTTIN), and Ctrl-C must reach
	// the command. simba's group gets it back when the command ends.
	tty, simbaGroup := foregroundTerminal()
	if tty >= 0 {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			report("missing %v", err) // 127, as a shell, env(1) and timeout(1) say it
		} else {
			report("error %v", err)
		}
		return 0
	}
	pgid := cmd.Process.Pid
	report("started %d", pgid)
	giveBack := func() {
		if tty >= 0 {
			giveTerminal(tty, pgid, simbaGroup)
			tty = -1
		}
	}
	defer giveBack()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	msgs := make(chan string)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		close(msgs)
	}()

	var jobStop <-chan struct{}
	if tty >= 0 {
		jobStop = watchStopped(pgid)
	}
	s := stopper{pgid: pgid, grace: grace, ahead: ahead, deadline: deadline}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Orphans that end while the command runs are reaped as they go, so a
	// long-lived command does not pile up zombies under the watchdog.
	orphans := time.NewTicker(time.Second)
	defer orphans.Stop()
	for {
		wake := s.act(monoNow())
		var tick <-chan time.Time
		if wake > 0 {
			timer.Reset(time.Duration(wake))
			tick = timer.C
		}
		select {
		case err := <-done:
			why := s.why
			if why == "" {
				why = endSelf
			}
			giveBack()
			s.clean()
			report("exit %d %s", exitCode(err), why)
			return 0
		case m, ok := <-msgs:
			switch {
			case !ok:
				msgs = nil
				s.stop(monoNow(), endOrphaned)
			case m == "stop":
				s.stop(monoNow(), endStop)
			case m == "lost":
				s.stop(monoNow(), endLost)
				publish(0) // the token is no longer valid
			case strings.HasPrefix(m, "d "):
				if v, err := strconv.ParseInt(m[2:], 10, 64); err == nil && s.why != endLost {
					s.deadline = v
					publish(wallMillis(v))
				}
			}
		case <-tick:
		case <-orphans.C:
			reapExcept(pgid)
		case <-jobStop:
			// Ctrl-Z stopped the command: the terminal goes back to simba's
			// group, stopped too, so that the shell sees its job stopped. A
			// stopped simba renews nothing: the command is stopped by the
			// deadline, as ADR 0195 has it for a stopped simba.
			giveBack()
			_ = syscall.Kill(-simbaGroup, syscall.SIGTSTP)
			jobStop = nil
			if !stoppedWithin(os.Getppid(), 500*time.Millisecond) {
				// An orphaned group (no shell in the session to continue
				// it) is not stopped by SIGTSTP: neither is the command then,
				// or it would hold the lock stopped with nobody to continue it.
				_ = syscall.Kill(-pgid, syscall.SIGCONT)
			}
		}
		timer.Stop() // go 1.23 timers: no stale tick is left to drain
	}
}

// stopper decides when the command's process group gets SIGTERM and
// SIGKILL. The rule it keeps: SIGKILL no later than the deadline, the
// latest simba reported; SIGTERM AHEAD before it if simba is silent (its
// renewals were not reported in time), or at once when simba asks, then
// SIGKILL after the grace if that comes first.
type stopper struct {
	pgid                   int
	grace, ahead, deadline int64
	why                    string // "" while the command runs unasked
	termAt                 int64  // when SIGTERM was sent, 0 before
	killed                 bool
}

// stop asks for the command to stop now, for reason why (the first reason
// given is the one reported, except that lost overrides: the token is over).
func (s *stopper) stop(now int64, why string) {
	if s.why == "" || why == endLost {
		s.why = why
	}
	if s.termAt == 0 {
		s.signal(syscall.SIGTERM)
		s.signal(syscall.SIGCONT) // a stopped process (Ctrl-Z) must run to hear it, as kill(1) does for a job
		s.termAt = now
	}
}

// act sends what is due at now and returns the nanoseconds until the next
// action, or 0 if none is left.
func (s *stopper) act(now int64) int64 {
	if s.killed {
		return 0
	}
	killAt := s.deadline
	if s.termAt != 0 && s.termAt+s.grace < killAt {
		killAt = s.termAt + s.grace
	}
	if now >= killAt {
		if s.why == "" {
			s.why = endDeadline
		}
		s.signal(syscall.SIGTERM) // a no-op for a process that got it already; one that did not learns why
		s.signal(syscall.SIGKILL)
		s.killed = true
		return 0
	}
	if s.termAt == 0 {
		if termAt := s.deadline - s.ahead; now >= termAt {
			s.stop(now, endDeadline)
		} else {
			return termAt - now
		}
	}
	return killAt - now
}

func (s *stopper) signal(sig syscall.Signal) {
	if err := syscall.Kill(-s.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "simba: signal the command's process group %d: %v\n", s.pgid, err)
	}
	// And the watchdog's other children: what left the group and was
	// orphaned (the watchdog is their subreaper). The command itself, while
	// unreaped, is in the group; its pid is not signalled alone, as
	// cmd.Wait may reap it at any moment.
	for _, pid := range children() {
		if pid != s.pgid {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// clean stops what the command left running in its process group (a
// background job of a shell) after it exited: nothing it started may
// outlive the lock either. The same bounds apply: SIGTERM now, SIGKILL
// after the grace or at the deadline, whichever comes first.
//
// It is called once the command has been reaped, so every child the
// watchdog has left is an orphan of the command's: it reaps them (under a
// PID 1 that reaps nothing they would stay zombies) and ends only when
// neither the group nor any child is left. A zombie of the group that is
// not its child (outside Linux, no subreaper) ends the wait at SIGKILL.
func (s *stopper) clean() {
	alive := func() bool {
		reap()
		return syscall.Kill(-s.pgid, 0) == nil || len(children()) > 0
	}
	if !alive() {
		return
	}
	if !s.killed {
		s.stop(monoNow(), s.why)
	}
	for alive() {
		wake := s.act(monoNow())
		if wake == 0 {
			// SIGKILL sent: again to what was orphaned since (a daemon's
			// own children), until nothing the watchdog can reach is left.
			s.signal(syscall.SIGKILL)
			if len(children()) == 0 {
				return // what is left of the group is exiting, or a zombie nobody reaps
			}
			time.Sleep(10 * time.Millisecond) // each look reads /proc whole
			continue
		}
		time.Sleep(min(time.Duration(wake), 10*time.Millisecond))
	}
}

// reap collects every child that has ended, without waiting.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// reapExcept collects the ended children other than pid (the command,
// which cmd.Wait reaps), without waiting.
func reapExcept(pid int) {
	for _, c := range children() {
		if c != pid {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c, &ws, syscall.WNOHANG, nil)
		}
	}
}

// children lists the watchdog's child processes (from /proc; none where
// there is no /proc).
func children() []int {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				out = append(out, pid)
			}
		}
	}
	return out
}

// foregroundTerminal returns the first of the watchdog's descriptors 0-2
// that is a terminal whose foreground process group is simba's (the
// watchdog's parent), and that group; -1 if there is none (no terminal,
// or simba runs in the background).
func foregroundTerminal() (int, int) {
	parent, err := unix.Getpgid(os.Getppid())
	if err != nil {
		return -1, 0
	}
	for fd := 0; fd <= 2; fd++ {
		if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg == parent {
			return fd, parent
		}
	}
	return -1, 0
}

// giveTerminal makes group the foreground process group of tty again if
// from (the command's group) still has it. The watchdog is not in the
// foreground: SIGTTOU, which would stop it for asking, is ignored from now
// on (the command has been started; nothing inherits that).
func giveTerminal(tty, from, group int) {
	signal.Ignore(syscall.SIGTTOU)
	if fg, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP); err == nil && fg == from {
		_ = unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, group)
	}
}

// stoppedWithin tells whether process pid is stopped within d.
func stoppedWithin(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if processState(pid) == 'T' {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// processState is the state letter of process pid in /proc (0 if gone).
func processState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

// watchStopped reports once when process pid is stopped (state T in
// /proc: Ctrl-Z, SIGTTIN, SIGTTOU); it ends when pid is gone.
func watchStopped(pid int) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			switch processState(pid) {
			case 0:
				return
			case 'T':
				close(out)
				return
			}
		}
	}()
	return out
}
