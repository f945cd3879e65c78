package zksimba_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// holderEnv makes the test binary run as a lease holder process (see
// runHolder) instead of running tests.
const holderEnv = "SIMBA_ZK_TEST_HOLDER"

// runHolder is the body of the holder process: it opens a session on
// SIMBA_ZK_SERVERS, acquires the name in SIMBA_ZK_TEST_HOLDER under the
// root in SIMBA_ZK_TEST_ROOT, prints "token N", and renews every fifth of
// the 2 s lease until it is killed.
func runHolder() int {
	srv, root, name := os.Getenv("SIMBA_ZK_SERVERS"), os.Getenv("SIMBA_ZK_TEST_ROOT"), os.Getenv(holderEnv)
	b, err := zksimba.New(strings.Split(srv, ","), root)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
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
