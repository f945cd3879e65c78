package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// environment is what every command gets.
type environment struct {
	ctx      context.Context // cancelled by SIGINT or SIGTERM
	target   target
	identity string
	lease    time.Duration
	stdout   *os.File
	stderr   *os.File
}

// open connects and opens a session; closing it releases everything.
func (e *environment) open() (*session.Session, func(), error) { return e.openWith(false) }

// openWith is open; with existing (the commands that only look), a SQL
// namespace must exist and is neither created nor migrated.
func (e *environment) openWith(existing bool) (*session.Session, func(), error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	b, shutdown, err := e.target.connect(ctx, existing)
	if err != nil {
		return nil, nil, &exitError{connectExit(err), err}
	}
	opts := []session.Option{session.WithLogger(nil), session.WithConfig(deadline.Config{LeaseDuration: e.lease})}
	if e.identity != "" {
		opts = append(opts, session.WithIdentity(e.identity, nil))
	}
	s, err := session.Open(ctx, b, opts...)
	if err != nil {
		shutdown()
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, &exitError{exitUnavailable, fmt.Errorf("open a session: %w", err)}
		}
		return nil, nil, &exitError{exitUsage, err}
	}
	return s, func() { _ = s.Close(); shutdown() }, nil
}

type initCmd struct {
	Force bool `help:"Create the namespace's epoch even where the server shows a sign of a recent loss (ForceInit). Safe only when no process of the namespace has held a lease within one maximum lease: a namespace never used, or every process using it stopped that long."`
}

// initialiser is a backend with an explicit initialisation step for new
// namespaces (zksimba, redissimba). Their Init is safe to run at every
// deployment: it refuses (session.ErrInitUnsafe) where the server shows a
// sign that records may have been lost within one maximum lease, and then
// writes nothing, so the namespace's first use is quarantined.
type initialiser interface {
	Init(ctx context.Context) error
}

// forceInitialiser is a backend whose Init can be told to skip those
// checks, for the operator who knows the namespace is new.
type forceInitialiser interface {
	ForceInit(ctx context.Context) error
}

func (c *initCmd) Run(e *environment) error {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	b, shutdown, err := e.target.connect(ctx, false)
	if err != nil {
		return &exitError{exitUnavailable, err}
	}
	defer shutdown()
	in, ok := b.(initialiser)
	if !ok {
		fmt.Fprintln(e.stdout, "nothing to initialise: this backend creates its namespace itself")
		return nil
	}
	run := in.Init
	if f, ok := b.(forceInitialiser); ok && c.Force {
		run = f.ForceInit
	}
	// A backend without ForceInit has no check for --force to skip.
	if err := run(ctx); err != nil {
		if errors.Is(err, session.ErrInitUnsafe) {
			// Refused, nothing written: the first use waits one maximum
			// lease, which is safe. Its own exit code, so that a deploy
			// job can accept it (simba init || [ $? = 75 ]).
			return &exitError{exitConflict, fmt.Errorf("init: %w", err)}
		}
		return &exitError{exitUnavailable, fmt.Errorf("init: %w", err)}
	}
	fmt.Fprintln(e.stdout, "initialised")
	return nil
}

type leasesCmd struct {
	Prefix string `arg:"" optional:"" help:"Only names starting with PREFIX."`
	JSON   bool   `help:"Print JSON."`
}

func (c *leasesCmd) Run(e *environment) error {
	insp, shutdown, err := e.inspector()
	if err != nil {
		return err
	}
	defer shutdown()
	hs, err := insp.Inspect(e.ctx, session.InspectRequest{Prefix: c.Prefix})
	if err != nil {
		return &exitError{inspectExit(err), err}
	}
	if c.JSON {
		return json.NewEncoder(e.stdout).Encode(hs)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTOKEN\tHOLDER\tSESSION\tREMAINING")
	for _, h := range hs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%v\n", h.Name, h.Token, h.Owner.Identity, h.Session, h.Remaining.Round(time.Millisecond))
	}
	return w.Flush()
}

type leaderCmd struct {
	Name string `arg:"" help:"The election's lease name."`
	JSON bool   `help:"Print JSON."`
}

func (c *leaderCmd) Run(e *environment) error {
	if err := deadline.ValidateName(c.Name); err != nil {
		return &exitError{exitUsage, fmt.Errorf("leader of %q: %w", c.Name, err)}
	}
	insp, shutdown, err := e.inspector()
	if err != nil {
		return err
	}
	defer shutdown()
	hs, err := insp.Inspect(e.ctx, session.InspectRequest{Names: []string{c.Name}})
	if err != nil {
		return &exitError{inspectExit(err), err}
	}
	var h session.Holder
	ok := len(hs) == 1 && hs[0].Name == c.Name
	if ok {
		h = hs[0]
	}
	if !ok {
		if c.JSON {
			fmt.Fprintln(e.stdout, "null")
		}
		return &exitError{code: exitNone, err: fmt.Errorf("nobody holds %q", c.Name)}
	}
	if c.JSON {
		return json.NewEncoder(e.stdout).Encode(h)
	}
	fmt.Fprintf(e.stdout, "%s token=%d session=%s remaining=%v\n", h.Owner.Identity, h.Token, h.Session, h.Remaining.Round(time.Millisecond))
	return nil
}

type watchCmd struct {
	Name string        `arg:"" help:"The election's lease name."`
	Poll time.Duration `help:"How often to ask the backend (a release notice, sent on Redis and PostgreSQL only for a name a candidate waits for, makes it ask at once)." default:"1s"`
}

func (c *watchCmd) Run(e *environment) error {
	if err := deadline.ValidateName(c.Name); err != nil {
		return &exitError{exitUsage, fmt.Errorf("watch %q: %w", c.Name, err)}
	}
	// Without a session (a session is a write), as leases and leader: the
	// backend's Inspector, polled, and its release notices when it has
	// them (issue 22.3).
	insp, shutdown, err := e.inspector()
	if err != nil {
		return err
	}
	defer shutdown()
	wake := make(chan struct{}, 1)
	if br, ok := insp.(driver.Broadcaster); ok {
		if stop, err := br.Subscribe(func(n driver.Notice) {
			if n.Name == c.Name || n.Name == "" {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}); err == nil {
			defer stop()
		}
	}
	// printed: a line was printed; held and last: what it said.
	var printed, held bool
	var last session.Holder
	for first := true; ; first = false {
		hs, err := insp.Inspect(e.ctx, session.InspectRequest{Names: []string{c.Name}})
		switch {
		case err != nil && first:
			return &exitError{inspectExit(err), err}
		case err != nil: // retried at the next poll, the last line standing
		case len(hs) == 1 && hs[0].Name == c.Name:
			h := hs[0]
			if !printed || !held || last.Token != h.Token || last.Session != h.Session || last.Owner.Identity != h.Owner.Identity {
				fmt.Fprintf(e.stdout, "%s %s token=%d session=%s\n", time.Now().Format(time.RFC3339), h.Owner.Identity, h.Token, h.Session)
			}
			printed, held, last = true, true, h
		default:
			if !printed || held {
				fmt.Fprintf(e.stdout, "%s none\n", time.Now().Format(time.RFC3339))
			}
			printed, held = true, false
		}
		t := time.NewTimer(c.Poll)
		select {
		case <-e.ctx.Done():
			t.Stop()
			return nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

type execCmd struct {
	Lock             string        `help:"Hold lock NAME while the command runs." xor:"mode" required:""`
	Elect            string        `help:"Run the command only while leader of NAME, again for each new term." xor:"mode" required:""`
	Nonblock         bool          `short:"n" help:"With --lock: fail at once if the lock is held."`
	Timeout          time.Duration `short:"w" help:"With --lock: give up after this long (0: wait forever)."`
	Grace            time.Duration `help:"Between SIGTERM and SIGKILL when the lock or term is lost." default:"10s"`
	ConflictExitCode int           `short:"E" help:"Exit code when the lock is not acquired." default:"75"`
	Command          []string      `arg:"" passthrough:"" help:"The command and its arguments (after --)."`
}

func (c *execCmd) Run(e *environment) error {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if len(c.Command) == 0 {
		return &exitError{exitUsage, errors.New("exec: no command (simba exec --lock NAME -- CMD ARGS...)")}
	}
	s, closeAll, err := e.open()
	if err != nil {
		return err
	}
	defer closeAll()
	if c.Lock != "" {
		return c.locked(e, s)
	}
	return c.elected(e, s)
}

func (c *execCmd) locked(e *environment, s *session.Session) error {
	ctx := e.ctx
	var h *lock.Held
	var err error
	if c.Nonblock {
		h, err = lock.TryAcquire(ctx, s, c.Lock)
	} else {
		if c.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.Timeout)
			defer cancel()
		}
		h, err = lock.Acquire(ctx, s, c.Lock)
	}
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded) && e.ctx.Err() == nil:
		return &exitError{c.ConflictExitCode, fmt.Errorf("lock %q not acquired: %w", c.Lock, err)}
	case e.ctx.Err() != nil:
		return &exitError{code: exitInterrupted}
	default:
		return &exitError{exitUnavailable, err}
	}
	defer h.Close()
	code, err := c.runFor(e, h.Term())
	return &exitError{code, err}
}

func (c *execCmd) elected(e *environment, s *session.Session) error {
	terms := make(chan *term.Term, 1)
	el, err := election.Start(s, c.Elect, election.WithListener(election.Funcs{
		Elected: func(t *term.Term) { terms <- t },
	}))
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer el.Close()
	for {
		select {
		case <-e.ctx.Done():
			return &exitError{code: exitInterrupted}
		case t := <-terms:
			for {
				code, err := c.runFor(e, t)
				if code != exitLost {
					return &exitError{code, err}
				}
				fmt.Fprintf(e.stderr, "simba: %v; waiting for a new term\n", err)
				if !c.renewed(e, t) {
					break
				}
				// The watchdog stopped the command as the deadline came
				// near, but the session renewed after all: the term goes on,
				// and so does the command, under the same token.
			}
		}
	}
}

// renewed waits until t has been renewed to more than twice the time
// before its deadline at which the watchdog stops the command (true) or
// has ended (false; also when simba is interrupted).
func (c *execCmd) renewed(e *environment, t *term.Term) bool {
	tick := time.NewTicker(max(e.lease/10, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if t.Remaining() > 2*min(c.Grace, e.lease/6) {
			return true
		}
		select {
		case <-t.Done():
			return false
		case <-e.ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// runFor runs the command under term t through the watchdog (watchdog.go),
// which stops it (SIGTERM, then SIGKILL after the grace, and never later
// than the term's local deadline) when t ends, when simba is interrupted,
// and by itself when simba dies or stops feeding it renewed deadlines. It
// returns the command's exit code, exitLost if t ended first or its
// deadline came with no renewal, exitInterrupted if simba was interrupted.
func (c *execCmd) runFor(e *environment, t *term.Term) (int, error) {
	w, err := startWatchdog(e, c, t)
	if err != nil {
		return exitCannotRun, err
	}
	// Each renewal moves the deadline: tell the watchdog well before the
	// old one comes near (it acts only AHEAD before it).
	tick := time.NewTicker(max(e.lease/10, 10*time.Millisecond))
	defer tick.Stop()
	asked := ""
	lost, interrupted := t.Done(), e.ctx.Done()
	// simba's own stop, should the watchdog not act (frozen, stuck): SIGKILL
	// of the command's group a little after the watchdog's time for it, then
	// of the watchdog if it still does not report.
	var fallback <-chan time.Time
	fallbackStage := 0
	var stopAt int64
	// due is when the watchdog SIGKILLs the group (as stopper.act computes
	// it) plus the slack.
	due := func() time.Duration {
		return time.Duration(min(stopAt+int64(c.Grace), w.deadline)-monoNow()) + fallbackSlack
	}
	stopping := func() {
		if stopAt == 0 {
			stopAt = monoNow()
			// At least the slack after simba asks: a simba that was frozen
			// past the watchdog's time gives the watchdog's report, in
			// its pipe by now, the time to be read.
			fallback = time.After(max(due(), fallbackSlack))
		}
	}
	for {
		select {
		case r := <-w.done:
			switch {
			case asked == endLost:
				return exitLost, fmt.Errorf("lost %q (%v): command stopped", t.Name(), t.Reason())
			case asked == endStop:
				return exitInterrupted, nil
			case r.err != nil && r.missing:
				return exitNotFound, r.err
			case r.err != nil:
				return exitCannotRun, r.err
			case r.why == endDeadline:
				return exitLost, fmt.Errorf("%q: the term's local deadline came with no renewal reported: command stopped", t.Name())
			}
			return r.code, nil
		case <-tick.C:
			if asked != endLost {
				w.sendDeadline(t)
			}
		case <-lost:
			lost, asked = nil, endLost
			w.send("lost")
			stopping()
		case <-interrupted:
			interrupted = nil
			if asked == "" {
				asked = endStop
				w.send("stop")
			}
			stopping()
		case <-fallback:
			if d := due(); fallbackStage == 0 && d > 0 {
				fallback = time.After(d) // renewals moved the deadline since
				continue
			}
			fallbackStage++
			if fallbackStage == 1 {
				if w.reported.Load() {
					// The watchdog stopped it in time and has reported (simba,
					// frozen, reads it only now): its group is gone, maybe its
					// id reused; only the watchdog's exit is waited for.
					fallback = time.After(time.Second)
					continue
				}
				fmt.Fprintln(e.stderr, "simba: the watchdog did not stop the command in time: killing its process group")
				w.killGroup()
				fallback = time.After(time.Second)
			} else {
				fmt.Fprintln(e.stderr, "simba: the watchdog does not report: killing it")
				w.killWatchdog()
				fallback = nil
			}
		}
	}
}

// fallbackSlack is how long after the watchdog's time simba kills the
// command's group itself: the watchdog, when it runs, acts and reports
// first, so simba never signals a group the watchdog has already reaped.
const fallbackSlack = 200 * time.Millisecond

// watchdogRun is a started watchdog as simba sees it.
type watchdogRun struct {
	ctl      *os.File
	proc     *os.Process         // the watchdog
	pgid     atomic.Int64        // the command's process group, once started
	reported atomic.Bool         // the watchdog reported the command's end: its group is gone
	deadline int64               // the last deadline sent (CLOCK_MONOTONIC ns); runFor's goroutine only
	done     chan watchdogResult // one value, when the command and the watchdog have ended
}

// killGroup SIGKILLs the command's process group: while the watchdog has
// not reported, the command is its unreaped child, so the group's id is
// still the command's.
func (w *watchdogRun) killGroup() {
	if pgid := w.pgid.Load(); pgid > 0 {
		_ = syscall.Kill(-int(pgid), syscall.SIGKILL)
	}
}

// killWatchdog SIGKILLs the watchdog (a stopped process dies too), so that
// done reports.
func (w *watchdogRun) killWatchdog() { _ = w.proc.Signal(syscall.SIGKILL) }

type watchdogResult struct {
	code int
	why  string
	err  error // the command did not run, or the watchdog failed
	// missing: the command does not exist (127), not one that cannot run (126)
	missing bool
}

// startWatchdog starts `simba __watchdog` with the command; the command's
// environment gets the token and the lease's name (the watchdog adds the
// deadline).
func startWatchdog(e *environment, c *execCmd, t *term.Term) (*watchdogRun, error) {
	deadline, ok := monoDeadline(t.Remaining)
	if !ok {
		return nil, fmt.Errorf("%q: the term ended before the command could start", t.Name())
	}
	self, err := selfPath()
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		_ = ctlR.Close()
		_ = ctlW.Close()
		return nil, err
	}
	// SIGTERM this long before the deadline when simba falls silent: the
	// grace, but less than a renewal period's half, so that one renewal a
	// little late stops nothing.
	ahead := min(c.Grace, e.lease/6)
	args := append([]string{watchdogArg, strconv.FormatInt(int64(c.Grace), 10), strconv.FormatInt(int64(ahead), 10), strconv.FormatInt(deadline, 10), "--"}, c.Command...)
	cmd := exec.Command(self, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), "SIMBA_FENCING_TOKEN="+strconv.FormatUint(t.Token(), 10), "SIMBA_LEASE_NAME="+t.Name())
	cmd.ExtraFiles = []*os.File{ctlR, repW}
	// A process group of its own, as the command has: what stops or kills
	// simba's group (Ctrl-Z, a supervisor's kill of the group) leaves the
	// watchdog running to stop the command by the deadline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = ctlR.Close()
	_ = repW.Close()
	if err != nil {
		_ = ctlW.Close()
		_ = repR.Close()
		return nil, fmt.Errorf("start the watchdog %s: %w", self, err)
	}
	w := &watchdogRun{ctl: ctlW, proc: cmd.Process, deadline: deadline, done: make(chan watchdogResult, 1)}
	go func() {
		res := watchdogResult{err: errors.New("simba: the watchdog exited without reporting how the command ended")}
		pgid := 0
		sc := bufio.NewScanner(repR)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "started":
				pgid, _ = strconv.Atoi(f[1])
				w.pgid.Store(int64(pgid))
			case len(f) == 3 && f[0] == "exit":
				w.reported.Store(true)
				code, _ := strconv.Atoi(f[1])
				res = watchdogResult{code: code, why: f[2]}
			case len(f) >= 1 && f[0] == "error":
				res.err = errors.New(strings.TrimPrefix(sc.Text(), "error "))
			case len(f) >= 1 && f[0] == "missing":
				res.err, res.missing = errors.New(strings.TrimPrefix(sc.Text(), "missing ")), true
			case len(f) == 1 && f[0] == "expired":
				res = watchdogResult{code: exitLost, why: endDeadline}
			}
		}
		_ = repR.Close()
		werr := cmd.Wait()
		_ = ctlW.Close()
		if res.err != nil && pgid > 0 {
			// The watchdog died under the command: whatever is left of
			// its group must not outlive the lock either.
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			res.err = fmt.Errorf("%w (%v); the command's process group was killed", res.err, werr)
		}
		w.done <- res
	}()
	return w, nil
}

// sendDeadline tells the watchdog t's local deadline, read conservatively.
func (w *watchdogRun) sendDeadline(t *term.Term) {
	if d, ok := monoDeadline(t.Remaining); ok {
		w.deadline = d
		w.send("d " + strconv.FormatInt(d, 10))
	}
}

// send writes one message; a watchdog that is gone reports through done.
// A frozen one could fill the pipe: the write gives up at once rather than
// block simba (a message is shorter than PIPE_BUF, so it is written whole
// or not at all).
func (w *watchdogRun) send(msg string) {
	_ = w.ctl.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = w.ctl.WriteString(msg + "\n")
}

// selfPath is how to start this binary again: /proc/self/exe on Linux,
// which works even if the file was replaced or removed since.
func selfPath() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// inspector connects for a command that only looks, opening no session
// (a session is a write: a row, a key, a node): a SQL namespace must exist
// and is neither created nor migrated (issue 22.3).
func (e *environment) inspector() (driver.Inspector, func(), error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	b, shutdown, err := e.target.connect(ctx, true)
	if err != nil {
		return nil, nil, &exitError{connectExit(err), err}
	}
	insp, ok := b.(driver.Inspector)
	if !ok {
		shutdown()
		return nil, nil, &exitError{exitUnavailable, fmt.Errorf("inspect: %w", session.ErrNoInspector)}
	}
	return insp, shutdown, nil
}

// connectExit is the exit code of a failed connection: an unknown
// namespace (a mistyped name) is a usage error, anything else makes the
// backend unavailable.
func connectExit(err error) int {
	if errors.Is(err, sqlbackend.ErrUnknownNamespace) {
		return exitUsage
	}
	return exitUnavailable
}

// inspectExit is the exit code of a failed inspection: a bad name is a
// usage error, anything else (no Inspector, the backend failing) makes the
// backend unavailable for the command.
func inspectExit(err error) int {
	if errors.Is(err, deadline.ErrInvalidName) {
		return exitUsage
	}
	return exitUnavailable
}

// exitCode is the shell's view of how the command ended.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitCannotRun
}
