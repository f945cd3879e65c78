package zksimba_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// A paused server (SIGSTOP) answers nothing and expires nothing. The
// holder's term must end at its local deadline, while the server is still
// paused, so before the server could expire the session; once resumed the
// lease goes to a new term (of a new session) with a higher token.
func TestServerPausedTermEndsFirst(t *testing.T) {
	zks := startZK(t, 1)
	srv, root := addrs(zks), newRoot(t)
	const timeout = 2 * time.Second
	s, _ := openEngine(t, newBackend(t, srv, root), timeout)
	r := claimName(t, s, "x")
	won := r.waitWon(t, 5*time.Second)

	zks[0].pause()
	pausedAt := time.Now()
	lost := r.waitLost(t, timeout)
	if lost.reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v, want DEADLINE_PASSED", lost.reason)
	}
	if el := lost.at.Sub(pausedAt); el > zksimba.Grant(timeout)+200*time.Millisecond {
		t.Fatalf("term ended %v after the pause, want within one grant (%v)", el, zksimba.Grant(timeout))
	}
	// Keep the server stopped past the session timeout, so that on
	// resuming it finds the session due for expiry.
	<-time.After(timeout + 2*testTick)
	zks[0].resume()
	resumedAt := time.Now()
	if !lost.at.Before(resumedAt) {
		t.Fatal("term outlived the server's pause")
	}

	// The claim still wants x: once the server has ended the old session
	// (expired, or closed by the watchdog's closeSession that waited in
	// its socket), a new session wins x as a new term with a higher token.
	next := r.waitWon(t, 5*timeout)
	if !next.at.After(resumedAt) {
		t.Fatalf("new term won at %v, before the server resumed at %v", next.at, resumedAt)
	}
	if next.t.Token() <= won.t.Token() {
		t.Fatalf("token after takeover %d, want > %d", next.t.Token(), won.t.Token())
	}
	t.Logf("term ended %v after the pause; new term %v after resuming", lost.at.Sub(pausedAt), next.at.Sub(resumedAt))
}

// A waiting candidate whose ensemble server dies moves to another server
// with the same session: it is told to try again (an empty notice), and
// its watch, re-set by go-zookeeper, still reports the holder's release.
// A row of the deployment matrix (matrix_test.go).
func serverLostWatchSurvives(t *testing.T, zks []*zkServer) {
	srv, root := addrs(zks), newRoot(t)
	const timeout = 6 * time.Second
	a, b := newBackend(t, srv, root), newBackend(t, srv, root)
	sa, sb := open(t, a, timeout), open(t, b, timeout)
	keepAlive(t, a, sa.ID, timeout/6)
	keepAlive(t, b, sb.ID, timeout/6)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	if got := acquire(t, b, sb.ID, "x")[0].Token; got != 0 {
		t.Fatalf("b acquired a held lease: %d", got)
	}
	all := make(chan driver.Notice, 64)
	stop, err := b.Subscribe(func(n driver.Notice) {
		select {
		case all <- n:
		default:
		}
	})
	must(t, err)
	t.Cleanup(stop)

	// Kill the server b is connected to, unless it is a's too (then a
	// would move as well, which is fine but not the point).
	var bs *zkServer
	waitUntil(t, 10*time.Second, "the server of b's session", func() bool {
		bs = serverOf(zks, sb.ID)
		return bs != nil
	})
	bs.kill()
	select {
	case n := <-all:
		if n.Name != "" {
			t.Fatalf("first notice after the server died = %+v, want the empty reconnect notice", n)
		}
	case <-time.After(timeout):
		t.Fatalf("b did not reconnect within %v", timeout)
	}
	if got, ok := b.SessionTimeout(sb.ID); !ok || got != timeout {
		t.Fatalf("b's session after moving: timeout %v, %v; want the same session", got, ok)
	}

	waitUntil(t, 10*time.Second, "a to answer after the server loss", func() bool {
		return a.Release(ctxT(t, time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "x", Token: tok}}}) == nil
	})
	for {
		select {
		case n := <-all:
			if n.Name != "x" {
				continue
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no notice for x after its release: the watch did not survive the move")
		}
		break
	}
	if got := acquire(t, b, sb.ID, "x")[0].Token; got <= tok {
		t.Fatalf("b's token %d, want > %d", got, tok)
	}
}

// serverOf is the server a session is connected to, from `cons`.
func serverOf(zks []*zkServer, id driver.ID) *zkServer {
	v, err := strconv.ParseUint(strings.TrimPrefix(string(id), "0x"), 16, 64)
	if err != nil {
		return nil
	}
	want := fmt.Sprintf("sid=0x%x,", v)
	for _, z := range zks {
		if out, err := fourLetter(z.addr(), "cons"); err == nil && strings.Contains(out, want) {
			return z
		}
	}
	return nil
}
