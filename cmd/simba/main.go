// Command simba asks a Simba backend who holds leases and runs commands
// under a lock or only while leader, like flock(1), `etcdctl lock` and
// `consul lock`.
//
//	simba --backend URL leases [PREFIX]       who holds what (--json)
//	simba --backend URL leader NAME           who leads NAME now
//	simba --backend URL watch NAME            print every change of NAME's holder
//	simba --backend URL exec --lock NAME -- CMD ARGS...
//	simba --backend URL exec --elect NAME -- CMD ARGS...
//	simba --backend URL init                  initialise a namespace never used
//
// The backend URL (or SIMBA_BACKEND) is one of redis://host:6379[/db],
// rediss://, redis+cluster://h1:7001,h2:7002, postgres://user@host/db,
// mysql://user:pass@host:3306/db, with ?namespace=NS (Redis namespace, SQL
// table prefix), or zk://h1:2181,h2:2181/root. The namespace must be the
// applications'.
//
// init creates a new namespace's epoch record on the backends that keep
// one (Redis, ZooKeeper): without it, the first use of a namespace waits
// one maximum lease, as after a data loss, since nothing tells the two
// apart (docs/adr/0130-quarantine-after-data-loss.md). Run it only on a
// namespace never used.
//
// exec --lock runs CMD while holding the lock, with the fencing token in
// SIMBA_FENCING_TOKEN and the name in SIMBA_LEASE_NAME. If the lock is
// lost (the session could not be renewed), CMD gets SIGTERM, then SIGKILL
// after --grace. exec --elect runs CMD only while leader: it is stopped the
// same way when a term ends and started again for each new term.
//
// Exit codes (as flock(1), the command's own status when it ran to its
// end):
//
//	0..    the command's exit status (128+N if it died of signal N)
//	64     usage: bad flags or backend URL
//	69     the backend is unavailable
//	75     the lock was not acquired (--nonblock, or --timeout passed); see --conflict-exit-code
//	76     the lock or leadership was lost while the command ran; it was stopped
//	1      leader: nobody holds the name
//	126    the command could not be started
//	130    interrupted (SIGINT or SIGTERM) before the command ended
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/simba-go/simba/deadline"
)

// Exit codes.
const (
	exitNone        = 1
	exitUsage       = 64
	exitUnavailable = 69
	exitConflict    = 75
	exitLost        = 76
	exitCannotRun   = 126
	exitInterrupted = 130
)

type cli struct {
	Backend  string        `help:"Backend URL (${schemes})." env:"SIMBA_BACKEND" required:""`
	Identity string        `help:"Identity to hold leases under (default hostname/pid)."`
	Lease    time.Duration `help:"Session lease duration (renewed every third of it); a lost lock is noticed within it." default:"15s"`

	Leases leasesCmd `cmd:"" help:"List the holders of leases, all or those starting with PREFIX."`
	Leader leaderCmd `cmd:"" help:"Print who holds NAME now; exit 1 if nobody does."`
	Watch  watchCmd  `cmd:"" help:"Print NAME's holder, then every change, until interrupted."`
	Exec   execCmd   `cmd:"" help:"Run a command holding a lock (--lock) or only while leader (--elect)."`
	Init   initCmd   `cmd:"" help:"Initialise a namespace never used (Redis, ZooKeeper), so its first use is not quarantined."`
}

func main() {
	// Backends log through slog's default logger: keep a command-line
	// tool's output to what matters.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code out of kong's Run.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return "exit status " + strconv.Itoa(e.code)
	}
	return e.err.Error()
}

func run(args []string, stdout, stderr *os.File) (code int) {
	var c cli
	parser, err := kong.New(&c, kong.Name("simba"),
		kong.Description("Ask a Simba backend who holds leases; run commands under a lock or while leader."),
		kong.Vars{"schemes": schemes},
		kong.Writers(stdout, stderr),
		kong.Exit(func(int) { panic(exitPanic{}) }))
	if err != nil {
		fmt.Fprintln(stderr, "simba:", err)
		return exitUsage
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(exitPanic); !ok {
				panic(r)
			}
			code = 0 // --help
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "simba:", err)
		return exitUsage
	}
	t, err := parseURL(c.Backend)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := (deadline.Config{LeaseDuration: c.Lease}).Validate(); err != nil {
		fmt.Fprintln(stderr, "simba: --lease:", err)
		return exitUsage
	}
	env := &environment{ctx: ctx, target: t, identity: c.Identity, lease: c.Lease, stdout: stdout, stderr: stderr}
	if err := kctx.Run(env); err != nil {
		var e *exitError
		if errors.As(err, &e) {
			if e.err != nil {
				fmt.Fprintln(stderr, e.err)
			}
			return e.code
		}
		fmt.Fprintln(stderr, err)
		return exitUnavailable
	}
	return 0
}

// exitPanic stops kong's --help from calling os.Exit inside run.
type exitPanic struct{}
