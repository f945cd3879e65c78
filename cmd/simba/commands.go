package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
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
func (e *environment) open() (*session.Session, func(), error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	b, shutdown, err := e.target.connect(ctx)
	if err != nil {
		return nil, nil, &exitError{exitUnavailable, err}
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

type initCmd struct{}

// initialiser is a backend with an explicit initialisation step for new
// namespaces (zksimba, redissimba).
type initialiser interface {
	Init(ctx context.Context) error
}

func (c *initCmd) Run(e *environment) error {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	b, shutdown, err := e.target.connect(ctx)
	if err != nil {
		return &exitError{exitUnavailable, err}
	}
	defer shutdown()
	in, ok := b.(initialiser)
	if !ok {
		fmt.Fprintln(e.stdout, "nothing to initialise: this backend creates its namespace itself")
		return nil
	}
	if err := in.Init(ctx); err != nil {
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
	s, closeAll, err := e.open()
	if err != nil {
		return err
	}
	defer closeAll()
	hs, err := s.Inspect(e.ctx, session.InspectRequest{Prefix: c.Prefix})
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
	s, closeAll, err := e.open()
	if err != nil {
		return err
	}
	defer closeAll()
	h, ok, err := election.LeaderOf(e.ctx, s, c.Name)
	if err != nil {
		return &exitError{inspectExit(err), err}
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
	s, closeAll, err := e.open()
	if err != nil {
		return err
	}
	defer closeAll()
	ch, err := election.Observe(e.ctx, s, c.Name, election.PollEvery(c.Poll))
	if err != nil {
		return &exitError{inspectExit(err), err}
	}
	for o := range ch {
		if o.Held {
			fmt.Fprintf(e.stdout, "%s %s token=%d session=%s\n", time.Now().Format(time.RFC3339), o.Holder.Owner.Identity, o.Holder.Token, o.Holder.Session)
		} else {
			fmt.Fprintf(e.stdout, "%s none\n", time.Now().Format(time.RFC3339))
		}
	}
	return nil
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
			code, err := c.runFor(e, t)
			if code == exitLost {
				fmt.Fprintf(e.stderr, "simba: term %d of %q ended (%v): command stopped; waiting for a new term\n", t.Token(), c.Elect, t.Reason())
				continue
			}
			return &exitError{code, err}
		}
	}
}

// runFor runs the command under term t: it is stopped (SIGTERM, then
// SIGKILL after the grace) when t ends or simba is interrupted. It returns
// the command's exit code, exitLost if t ended first, exitInterrupted if
// simba was interrupted.
func (c *execCmd) runFor(e *environment, t *term.Term) (int, error) {
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), "SIMBA_FENCING_TOKEN="+strconv.FormatUint(t.Token(), 10), "SIMBA_LEASE_NAME="+t.Name())
	// Its own process group: stopping it stops what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return exitCannotRun, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err), nil
	case <-t.Done():
		c.stop(cmd, done)
		return exitLost, fmt.Errorf("lost %q (%v): command stopped", t.Name(), t.Reason())
	case <-e.ctx.Done():
		c.stop(cmd, done)
		return exitInterrupted, nil
	}
}

// stop sends SIGTERM to the command's process group, then SIGKILL after
// the grace, and waits for it to exit.
func (c *execCmd) stop(cmd *exec.Cmd, done <-chan error) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	grace := time.NewTimer(c.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
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
