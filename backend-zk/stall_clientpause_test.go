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
	"github.com/simba-go/simba/session/driver"
)

// busyEnv makes the test binary run as a busy client (runBusyClient)
// instead of running tests.
const busyEnv = "SIMBA_ZK_TEST_BUSY_CLIENT"

// runBusyClient opens a session on the servers in SIMBA_ZK_TEST_BUSY_CLIENT
// under SIMBA_ZK_TEST_ROOT and renews it back to back, so that a request
// is nearly always in flight, logging the backend's warnings to stdout.
func runBusyClient() int {
	srv, root := os.Getenv(busyEnv), os.Getenv("SIMBA_ZK_TEST_ROOT")
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := zksimba.New(strings.Split(srv, ","), root, zksimba.WithLogger(logger))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	if err := zksimba.InitForTest(ctx, b); err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: 10 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	for {
		if _, err := b.Renew(ctx, driver.RenewRequest{ID: s.ID}); err != nil {
			fmt.Println("renew error", err)
		}
	}
}

// A client process that is itself stopped (SIGSTOP, a frozen VM) for
// longer than the stall limit finds, on resuming, the answers to its
// requests waiting in its socket. The server did answer: the connection
// must not be closed as stalled.
func TestClientPausedIsNoServerStall(t *testing.T) {
	srv := ensemble(t) // only as a client: three addresses, so the stall wrapper is on
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), busyEnv+"="+strings.Join(srv, ","), "SIMBA_ZK_TEST_ROOT="+newRoot(t))
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("busy client: %s", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("busy client not ready")
	}
	// On resuming, the stall timer and the reader race: the timer does not
	// always run first, so the pause is repeated.
	for i := 0; i < 8; i++ {
		<-time.After(200 * time.Millisecond)
		must(t, cmd.Process.Signal(syscall.SIGSTOP))
		<-time.After(1300 * time.Millisecond) // stall limit 1 s, grant 4.17 s
		must(t, cmd.Process.Signal(syscall.SIGCONT))
	}
	<-time.After(time.Second)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, "closing the connection") || strings.Contains(l, "error") {
				t.Fatalf("after its own pauses the client closed a connection as stalled: %s", l)
			}
			continue
		default:
		}
		break
	}
}
