// Command simba asks a Simba backend who holds leases and runs commands
// under a lock or only while leader, like flock(1), `etcdctl lock` and
// `consul lock`.
//
//	simba --backend URL leases [PREFIX]       who holds what (--json)
//	simba --backend URL leader NAME           who leads NAME now
//	simba --backend URL watch NAME            print every change of NAME's holder
//	simba --backend URL exec --lock NAME -- CMD ARGS...
//	simba --backend URL exec --elect NAME -- CMD ARGS...
//	simba --backend URL init [--force]        initialise a new namespace (safe at every deploy)
//
// The backend URL (or SIMBA_BACKEND) is one of redis://host:6379[/db],
// rediss://, redis+cluster://h1:7001,h2:7002, postgres://user@host/db,
// mysql://user:pass@host:3306/db, with ?namespace=NS (Redis namespace, SQL
// table prefix), or zk://h1:2181,h2:2181/root, or etcd://h1:2379,h2:2379/?namespace=/root. The namespace must be the
// applications'. Redis also takes ?max_lease=D, which must be the
// applications' WithMaxLease when they set one (default 30s): init's
// checks and the quarantines this process starts are sized by it. Every
// URL takes ?max_lock_delay=D (zk://h:2181/root?max_lock_delay=15s), the
// applications' WithMaxLockDelay when they set one: added to the maximum
// lease for init's checks and the quarantines (ADRs 0281, 0296).
//
// init creates a new namespace's epoch record on the backends that keep
// one (Redis, ZooKeeper): without it, the first use of a namespace waits
// one maximum lease, as after a data loss, since nothing tells the two
// apart (docs/adr/0130-quarantine-after-data-loss.md). It is safe to run at
// every deployment: where the server shows a sign that records may have
// been lost within one maximum lease (a recent restart, a failover, a
// flush) it refuses, writes nothing and exits 75, and the first use waits;
// an existing namespace is left as it is. init --force skips those checks:
// only for a namespace never used, or one whose every process has been
// stopped for one maximum lease.
//
// exec --lock runs CMD while holding the lock, with the fencing token in
// SIMBA_FENCING_TOKEN, the name in SIMBA_LEASE_NAME, and the term's local
// deadline (Unix epoch milliseconds) in SIMBA_LEASE_DEADLINE_MS and, kept
// current, in the file SIMBA_LEASE_DEADLINE_FILE. A watchdog process stops
// CMD's process group (SIGTERM, then SIGKILL after --grace, and never later
// than the deadline) when the lock is lost and when simba is interrupted,
// killed or frozen (docs/adr/0195-exec-watchdog.md). exec --elect runs CMD
// only while leader: it is stopped the same way when a term ends and
// started again for each new term.
//
// Exit codes (as flock(1), the command's own status when it ran to its
// end):
//
//	0..    the command's exit status (128+N if it died of signal N)
//	64     usage: bad flags or backend URL
//	69     the backend is unavailable
//	75     the lock was not acquired (--nonblock, or --timeout passed); see --conflict-exit-code;
//	       init: refused to skip the first use's quarantine (see init --force)
//	76     the lock or leadership was lost while the command ran; it was stopped
//	1      leader: nobody holds the name
//	126    the command could not be started
//	127    the command was not found
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
	exitNotFound    = 127
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
	Init   initCmd   `cmd:"" help:"Initialise a new namespace (Redis, ZooKeeper), so its first use is not quarantined. Safe at every deploy: exits 75, writing nothing, where the server shows a sign of a recent loss (the first use then waits one maximum lease); --force skips the checks, only for a namespace never used or whose processes all stopped one maximum lease ago. Put the applications' WithMaxLockDelay in the URL (?max_lock_delay=15s, every backend) and, on Redis, their WithMaxLease (?max_lease=5m) when they set them; the checks are sized by their sum."`
}

func main() {
	// Backends log through slog's default logger: keep a command-line
	// tool's output to what matters.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(watchdog(os.Args[2:]))
	}
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
		kong.Help(helpWithNotes),
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
	// SIGHUP too: a closed terminal or a supervisor's reload must not kill
	// simba before it stops its command and releases what it holds.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
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

// helpNotes ends every --help: the URL forms and the exit codes, which a
// script needs and kong has no place for (ADR 0092).
const helpNotes = `
Backend URL (--backend or SIMBA_BACKEND); ?namespace= must be the applications':
  redis://host:6379[/DB]?namespace=NS       Redis namespace (default simba); rediss:// for TLS
  redis+cluster://h1:7001,h2:7002?namespace=NS
  postgres://user@host:5432/db?namespace=NS  table prefix (default simba); other parameters go to pgx
  mysql://user:pass@host:3306/db?namespace=NS
  zk://h1:2181,h2:2181/ROOT                  ZooKeeper: the path is the namespace

exec's command gets SIMBA_FENCING_TOKEN, SIMBA_LEASE_NAME, SIMBA_LEASE_DEADLINE_MS
(Unix epoch ms) and SIMBA_LEASE_DEADLINE_FILE (the current deadline, 0 once lost).

Exit codes:
  0..   the command's own status (128+N if it died of signal N)
  1     leader: nobody holds NAME
  64    usage: bad flags or backend URL
  69    the backend is unavailable
  75    exec --lock: not acquired (-n, or -w passed); -E sets another code
  76    exec: the lock or term was lost while the command ran; it was stopped
  126   exec: the command could not be started
  127   exec: the command was not found
  130   interrupted (SIGINT or SIGTERM) before the command ended
`

// helpWithNotes is kong's help followed by helpNotes.
func helpWithNotes(options kong.HelpOptions, ctx *kong.Context) error {
	if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
		return err
	}
	_, err := fmt.Fprint(ctx.Stdout, helpNotes)
	return err
}

// exitPanic stops kong's --help from calling os.Exit inside run.
type exitPanic struct{}
