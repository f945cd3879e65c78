package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/gocronsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/simbatest"
	"github.com/simba-go/simba/term"
)

// gocron v2 schedulers under Simba (issue 25): two real schedulers on one
// real backend, a job that must never run on both.

// jobRun is one run of the job: who ran it, under which token, when.
type jobRun struct {
	who   string
	token uint64
	at    time.Time
}

// runLog records runs and counts runs in flight across schedulers: with the
// tasks returning at once, two in flight means two schedulers believed
// themselves allowed at the same moment.
type runLog struct {
	mu       sync.Mutex
	runs     []jobRun
	inFlight atomic.Int32
	overlaps atomic.Int32
	notify   chan struct{}
}

func newRunLog() *runLog { return &runLog{notify: make(chan struct{}, 1024)} }

func (l *runLog) task(who string) election.Task {
	return func(ctx context.Context, t *term.Term) error {
		if l.inFlight.Add(1) > 1 {
			l.overlaps.Add(1)
		}
		defer l.inFlight.Add(-1)
		if err := t.EnsureValid(0); err != nil {
			return err
		}
		l.mu.Lock()
		l.runs = append(l.runs, jobRun{who, t.Token(), time.Now()})
		l.mu.Unlock()
		select {
		case l.notify <- struct{}{}:
		default:
		}
		return nil
	}
}

// waitRuns waits until who has run n times (real schedulers, real server:
// the wait is bounded and fails the test).
func (l *runLog) waitRuns(t *testing.T, who string, n int, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		l.mu.Lock()
		c := 0
		for _, r := range l.runs {
			if r.who == who {
				c++
			}
		}
		l.mu.Unlock()
		if c >= n {
			return
		}
		select {
		case <-l.notify:
		case <-timeout:
			t.Fatalf("%s ran %d times in %v, want %d", who, c, within, n)
		}
	}
}

// checkOrder: runs of different schedulers never interleave (each switch
// is a handover), and tokens never go down.
func (l *runLog) checkOrder(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for i, r := range l.runs {
		if i > 0 {
			p := l.runs[i-1]
			if r.token < p.token {
				t.Errorf("run %d by %s has token %d after %d", i, r.who, r.token, p.token)
			}
			if r.who != p.who {
				if seen[r.who] {
					t.Errorf("run %d: %s ran again after %s took over", i, r.who, p.who)
				}
				if r.token == p.token {
					t.Errorf("run %d: %s and %s ran under one token %d", i, r.who, p.who, r.token)
				}
			}
		}
		seen[r.who] = true
	}
	if n := l.overlaps.Load(); n > 0 {
		t.Errorf("%d runs overlapped a run of another scheduler", n)
	}
}

func newScheduler(t *testing.T, opt gocron.SchedulerOption, task func(context.Context) error, name string, every time.Duration) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.DurationJob(every), gocron.NewTask(task), gocron.WithName(name)); err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

var gocronBackends = []struct {
	name  string
	start func(t testing.TB) func() session.Backend
}{
	{"postgres", func(t testing.TB) func() session.Backend {
		s := simbatest.Postgres(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"redis", func(t testing.TB) func() session.Backend {
		s := simbatest.Redis(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
}

func gocronSession(t *testing.T, b session.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(t.Context(), b, session.WithConfig(timing), session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestGocronElectorLeaderOnly: two schedulers, one election each; the job
// runs on the leader only, and moves to the other on StepDown.
func TestGocronElectorLeaderOnly(t *testing.T) {
	for _, bk := range gocronBackends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			newClient := bk.start(t)
			log := newRunLog()
			elections := map[string]*election.Election{}
			for _, who := range []string{"a", "b"} {
				won := make(chan struct{}, 1)
				e, err := election.Start(gocronSession(t, newClient()), "reports",
					election.OnWon(func(*term.Term) { won <- struct{}{} }))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close() })
				elections[who] = e
				if who == "a" {
					<-won // a leads first
				}
				el := gocronsimba.Elector(e)
				newScheduler(t, gocron.WithDistributedElector(el), el.Task(log.task(who)), "report", 20*time.Millisecond)
			}
			log.waitRuns(t, "a", 5, 10*time.Second)
			if err := elections["a"].StepDown(t.Context(), time.Hour); err != nil {
				t.Fatal(err)
			}
			log.waitRuns(t, "b", 5, 10*time.Second)
			log.checkOrder(t)
		})
	}
}

// TestGocronLockerOneAtATime: two schedulers taking the job's lock for
// each run; runs never overlap and the job goes on when one scheduler's
// session closes.
func TestGocronLockerOneAtATime(t *testing.T) {
	for _, bk := range gocronBackends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			newClient := bk.start(t)
			log := newRunLog()
			var sessions []*session.Session
			for _, who := range []string{"a", "b"} {
				s := gocronSession(t, newClient())
				sessions = append(sessions, s)
				l := gocronsimba.Locker(s, gocronsimba.HoldAtLeast(time.Hour))
				t.Cleanup(func() { _ = l.Close() })
				newScheduler(t, gocron.WithDistributedLocker(l), l.Task("report", log.task(who)), "report", 20*time.Millisecond)
			}
			// With a hold longer than the test, the first to win keeps the
			// job until its session closes.
			log.mu.Lock()
			for len(log.runs) == 0 {
				log.mu.Unlock()
				<-log.notify
				log.mu.Lock()
			}
			first := log.runs[0].who
			log.mu.Unlock()
			other, idx := "b", 0
			if first == "b" {
				other, idx = "a", 1
			}
			log.waitRuns(t, first, 5, 10*time.Second)
			if err := sessions[idx].Close(); err != nil {
				t.Fatal(err)
			}
			log.waitRuns(t, other, 5, 10*time.Second)
			log.checkOrder(t)
		})
	}
}

// TestGocronLeaderKilled: the leading scheduler's process is killed with
// SIGKILL; the other takes the job over within the lease, with a higher
// token, and the dead one's runs all came first.
func TestGocronLeaderKilled(t *testing.T) {
	pg := simbatest.Postgres(t)
	ctx := t.Context()
	table := "gocron_runs_" + strings.ReplaceAll(pg.Namespace, "-", "_")
	if _, err := pg.Pool.Exec(ctx, `CREATE TABLE `+table+` (who text, token numeric, at timestamptz default clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestGocronChildScheduler$", "-test.count=1")
	child.Env = append(os.Environ(), "SIMBA_GOCRON_CHILD_URL="+pg.URL, "SIMBA_GOCRON_CHILD_NS="+pg.Namespace, "SIMBA_GOCRON_CHILD_TABLE="+table)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	count := func(who string) (n int, maxToken uint64, last time.Time) {
		t.Helper()
		var tok *string
		var at *time.Time
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*), max(token)::text, max(at) FROM `+table+` WHERE who = $1`, who).Scan(&n, &tok, &at); err != nil {
			t.Fatal(err)
		}
		if tok != nil {
			maxToken, _ = strconv.ParseUint(*tok, 10, 64)
		}
		if at != nil {
			last = *at
		}
		return
	}
	waitCount := func(who string, n int, within time.Duration) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(within)
		for {
			if c, _, _ := count(who); c >= n {
				return
			}
			select {
			case <-tick.C:
			case <-timeout:
				t.Fatalf("%s did not run %d times in %v", who, n, within)
			}
		}
	}
	waitCount("child", 3, 30*time.Second)

	// The parent's scheduler competes while the child leads.
	e, err := election.Start(gocronSession(t, pg.NewBackend(t)), "reports")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	el := gocronsimba.Elector(e)
	newScheduler(t, gocron.WithDistributedElector(el), el.Task(func(ctx context.Context, tm *term.Term) error {
		_, err := pg.Pool.Exec(ctx, `INSERT INTO `+table+` (who, token) VALUES ('parent', $1)`, strconv.FormatUint(tm.Token(), 10))
		return err
	}), "report", 20*time.Millisecond)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waitCount("parent", 3, 10*time.Second)
	_, childMax, childLast := count("child")
	n, parentMax, _ := count("parent")
	var parentFirst time.Time
	var parentMin string
	if err := pg.Pool.QueryRow(ctx, `SELECT min(at), min(token)::text FROM `+table+` WHERE who = 'parent'`).Scan(&parentFirst, &parentMin); err != nil {
		t.Fatal(err)
	}
	if !parentFirst.After(childLast) {
		t.Errorf("the parent ran at %v, before the killed child's last run at %v", parentFirst, childLast)
	}
	if pm, _ := strconv.ParseUint(parentMin, 10, 64); pm <= childMax {
		t.Errorf("the parent's token %d is not above the child's %d", pm, childMax)
	}
	if took := parentFirst.Sub(killedAt); took > timing.LeaseDuration+timing.RenewInterval+time.Second {
		t.Errorf("takeover took %v after the kill, lease %v", took, timing.LeaseDuration)
	}
	t.Logf("child ran up to token %d; parent ran %d times from %v after the kill, token %d", childMax, n, parentFirst.Sub(killedAt).Round(time.Millisecond), parentMax)
}

// TestGocronChildScheduler is the killed process of TestGocronLeaderKilled;
// it does nothing unless that test started it.
func TestGocronChildScheduler(t *testing.T) {
	url := os.Getenv("SIMBA_GOCRON_CHILD_URL")
	if url == "" {
		return
	}
	ns, table := os.Getenv("SIMBA_GOCRON_CHILD_NS"), os.Getenv("SIMBA_GOCRON_CHILD_TABLE")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	b, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(ns))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	s, err := session.Open(ctx, b, session.WithConfig(timing), session.WithLogger(nil))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	won := make(chan struct{}, 1)
	e, err := election.Start(s, "reports", election.OnWon(func(*term.Term) { won <- struct{}{} }))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	<-won
	el := gocronsimba.Elector(e)
	sched, _ := gocron.NewScheduler(gocron.WithDistributedElector(el))
	_, _ = sched.NewJob(gocron.DurationJob(20*time.Millisecond), gocron.NewTask(el.Task(func(ctx context.Context, tm *term.Term) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (who, token) VALUES ('child', $1)`, strconv.FormatUint(tm.Token(), 10))
		return err
	})), gocron.WithName("report"))
	sched.Start()
	select {} // until killed
}
