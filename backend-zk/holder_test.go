package zksimba_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// holderEnv makes the test binary run as a lease holder process (see
// runHolder) instead of running tests.
const holderEnv = "SIMBA_ZK_TEST_HOLDER"

// holderEngineEnv makes the holder process hold its name through the
// engine (a session with a 2 s lease and a claim), as an application does,
// printing "token N" for every term it wins; the test's root is already
// initialised.
const holderEngineEnv = "SIMBA_ZK_TEST_HOLDER_ENGINE"

func runEngineHolder(ctx context.Context, b *zksimba.Backend, name string) int {
	s, err := session.Open(ctx, b, session.WithConfig(deadline.Config{LeaseDuration: 2 * time.Second}),
		session.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	r := newClaimRec()
	c, err := layer.MustOf(s).Claim(name, r)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	for w := range r.won {
		fmt.Println("token", w.t.Token())
	}
	return 0
}

// runHolder is the body of the holder process: it opens a session on
// SIMBA_ZK_SERVERS, acquires the name in SIMBA_ZK_TEST_HOLDER under the
// root in SIMBA_ZK_TEST_ROOT, prints "token N", and renews every fifth of
// the 2 s lease until it is killed.
func runHolder() int {
	srv, root, name := os.Getenv("SIMBA_ZK_SERVERS"), os.Getenv("SIMBA_ZK_TEST_ROOT"), os.Getenv(holderEnv)
	b, err := zksimba.New(strings.Split(srv, ","), root, zksimba.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	if os.Getenv(holderEngineEnv) != "" {
		return runEngineHolder(ctx, b, name)
	}
	if err := b.ForceInit(ctx); err != nil { // the test's root is new
		fmt.Println("error", err)
		return 1
	}
	s, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: 2 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	r, err := b.Acquire(ctx, driver.AcquireRequest{ID: s.ID, Names: []string{name}})
	if err != nil || r.Results[0].Token == 0 {
		fmt.Println("error", r, err)
		return 1
	}
	fmt.Println("token", r.Results[0].Token)
	for range time.Tick(400 * time.Millisecond) {
		if _, err := b.Renew(ctx, driver.RenewRequest{ID: s.ID}); err != nil {
			fmt.Println("error", err)
		}
	}
	return 0
}

// A holder process paused (SIGSTOP) past its session timeout: its pings
// and renewals stop, the server expires its session, and the waiting
// candidate's watch hands the lease over about one timeout later, never
// before the holder's local deadline.
func TestHolderProcessPaused(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	const timeout = 2 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=x", "SIMBA_ZK_TEST_ROOT="+root, "SIMBA_ZK_SERVERS="+strings.Join(srv, ","))
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 16)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
	}()
	var holderToken uint64
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "token %d", &holderToken); err != nil {
			t.Fatalf("holder process said %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("holder process did not acquire within 20s")
	}

	s, _ := openEngine(t, newBackend(t, srv, root), timeout)
	r := claimName(t, s, "x")
	select {
	case w := <-r.won:
		t.Fatalf("candidate won %v while the holder process runs", w.t)
	case <-time.After(timeout):
	}

	must(t, cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()
	won := r.waitWon(t, 3*timeout)
	el := won.at.Sub(stoppedAt)
	// The holder's last renewal was sent before the stop, so its local
	// deadline was at most one grant after it.
	if el <= zksimba.Grant(timeout) {
		t.Fatalf("candidate won %v after the stop, before the holder's local deadline could have passed (grant %v)", el, zksimba.Grant(timeout))
	}
	if el > timeout+time.Second {
		t.Fatalf("candidate won %v after the stop, want about the %v session timeout", el, timeout)
	}
	if won.t.Token() <= holderToken {
		t.Fatalf("new token %d, want > %d", won.t.Token(), holderToken)
	}
	t.Logf("takeover %v after pausing the holder process (session timeout %v)", el, timeout)
}

// startHolder starts the test binary as a holder process of name under
// root (engine: through a session and a claim) and returns its process and
// the lines it prints.
func startHolder(t *testing.T, srv []string, root, name string, engine bool) (*exec.Cmd, <-chan string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+name, "SIMBA_ZK_TEST_ROOT="+root, "SIMBA_ZK_SERVERS="+strings.Join(srv, ","))
	if engine {
		cmd.Env = append(cmd.Env, holderEngineEnv+"=1")
	}
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 64)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
	}()
	return cmd, lines
}

// A leader process frozen (SIGSTOP) for 1.75 s with a 2 s lease: its
// term ends at its local deadline while it is stopped, the server still
// holds its session when it resumes, and its engine abandons that session.
// The session's close must reach the server (ADR 0139), so a new term
// begins within one lease of the freeze plus the candidates' reaction, not
// when the server expires the session up to a second lease later (4.1 s
// before the fix).
func TestFrozenLeaderFailsOverWithinOneLease(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	newBackend(t, srv, root) // Init
	const lease = 2 * time.Second
	cmd, lines := startHolder(t, srv, root, "x", true)
	var first uint64
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "token %d", &first); err != nil {
			t.Fatalf("holder process said %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("holder process did not win within 20s")
	}
	s, _ := openEngine(t, newBackend(t, srv, root), lease)
	r := claimName(t, s, "x")
	select {
	case w := <-r.won:
		t.Fatalf("candidate won %v while the holder process runs", w.t)
	case <-time.After(lease):
	}

	must(t, cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()
	<-time.After(1750 * time.Millisecond)
	must(t, cmd.Process.Signal(syscall.SIGCONT))

	// Either the candidate or the holder's new session wins next.
	var next uint64
	var at time.Time
	select {
	case w := <-r.won:
		next, at = w.t.Token(), w.at
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "token %d", &next); err != nil {
			t.Fatalf("holder process said %q", l)
		}
		at = time.Now()
	case <-time.After(3 * lease):
		t.Fatalf("no new term within %v of the freeze", 3*lease)
	}
	el := at.Sub(stoppedAt)
	t.Logf("new term %v after the freeze began (lease %v)", el, lease)
	if next <= first {
		t.Fatalf("new token %d, want > %d", next, first)
	}
	// One lease, plus the candidate's notice and acquisition and a loaded
	// machine's slack: well short of the second lease the server's expiry
	// after a revived session took.
	if limit := lease + 700*time.Millisecond; el > limit {
		t.Fatalf("new term %v after the freeze, want within %v", el, limit)
	}
}
