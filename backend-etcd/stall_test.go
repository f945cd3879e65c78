package etcdsimba_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLeaderStalledTimeline stalls the raft leader of a private
// three-member cluster for 6 s (twice the lease) and resumes it, while
// the holder of x renews every 300 ms, and records each renewal's send
// time and the belief it gives (send + remaining). A poller reads the
// holder's key every 50 ms through the members that were not stalled
// (linearizable: absent means its etcd lease is revoked), and after the
// resume a candidate on another backend tries x every 100 ms.
//
// On etcd before 3.4.31 / 3.5.13, and again from 3.5.16, the resumed
// leader's revocation of the leases it thinks expired is forwarded to the
// new leader and committed (etcd-io/etcd#15247, ADR 0290, 0320): measured
// on Debian's 3.4.23, in 7 of 20 runs on a loaded machine, the key
// vanished 30-80 ms after the resume with 2.25-2.98 s of the holder's
// belief left. The holder's backend has the default guard, decided by its
// version check before x is granted (ADR 0305): the candidate must still
// be refused until that belief has run out; a grant before it fails the
// test as two holders. SIMBA_STALL_LOOPS repeats it (default 1); on a
// failure the members' debug logs are copied under $TMPDIR/etcdstall.
// SIMBA_ETCD_BIN runs it on another etcd: on 3.5.17 the revocation passed
// in 2 of 10 runs, past the leadership check that etcd 3.5.16 skips for a
// member that ticked in its last three ticks (ADR 0320).
func TestLeaderStalledTimeline(t *testing.T) {
	loops := 1
	if v := os.Getenv("SIMBA_STALL_LOOPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SIMBA_STALL_LOOPS=%q: want a positive number", v)
		}
		loops = n
	}
	revoked := 0
	for i := range loops {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if stallTimeline(t) {
				revoked++
			}
		})
	}
	t.Logf("%d of %d runs saw the holder's etcd lease revoked early", revoked, loops)
}

// stallTimeline runs one stall and reports whether the holder's etcd
// lease was revoked before its belief ran out.
func stallTimeline(t *testing.T) bool {
	c := startPrivateWith(t, 3, "debug")
	ns := newNamespace(t)
	opts := []etcdsimba.Option{etcdsimba.WithMaxLease(matrixLease)}
	hb := newBackend(t, matrixClient(t, c), ns, opts...)
	holder := openOn(t, hb, matrixLease)
	cb := newBackendNoInit(t, matrixClient(t, c), ns, opts...)
	cand := openOn(t, cb, matrixLease)
	for end := time.Now().Add(10 * time.Second); !etcdsimba.VersionsChecked(hb); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the version check did not finish within 10 s of the first Open")
		}
	}
	t.Logf("etcd %s: the revoke guard is on: %v", c.version(), etcdsimba.GuardOn(hb))
	tok := holder.mustAcquire("x")
	t0 := time.Now()
	ms := func(at time.Time) string { return fmt.Sprintf("%6dms", at.Sub(t0).Milliseconds()) }
	var lines []string
	logf := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	l := c.leader(0)
	fail := func(why string) {
		dst := fmt.Sprintf("%s/etcdstall/%s-%d", os.TempDir(), strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
		_ = os.MkdirAll(dst, 0o755)
		_ = exec.Command("cp", "-r", c.dir+"/.", dst).Run()
		t.Fatalf("%s (leader m%d; member logs in %s)\n%s", why, l, dst, strings.Join(lines, "\n"))
	}

	var eps []string
	for i := range c.members {
		if i != l {
			eps = append(eps, c.endpoint(i))
		}
	}
	pcli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zapNop})
	if err != nil {
		t.Fatal(err)
	}
	defer pcli.Close()
	gone := make(chan time.Time, 1)
	var pollFails atomic.Int32
	var pollLastFail atomic.Int64 // ms since t0
	stopPoll, pollDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			r, err := pcli.Get(ctx, ns+"/@simba/l/x")
			cancel()
			if err != nil {
				pollFails.Add(1)
				pollLastFail.Store(time.Since(t0).Milliseconds())
			}
			if err == nil && len(r.Kvs) == 0 {
				gone <- time.Now()
				return
			}
		}
	}()
	defer func() { close(stopPoll); <-pollDone }()

	var belief, endedAt time.Time
	holderAlive := true
	renew := func(tag string) {
		if !holderAlive {
			return
		}
		sent := time.Now()
		r, err := holder.renew(500 * time.Millisecond)
		switch {
		case err == nil:
			belief = sent.Add(r.Remaining)
			logf("%s %s renewal: reply at %s, remaining %v, belief to %s", ms(sent), tag, ms(time.Now()), r.Remaining, ms(belief))
		case errors.Is(err, driver.ErrExpired):
			holderAlive, endedAt = false, time.Now()
			logf("%s %s renewal: the session ended at %s: %v", ms(sent), tag, ms(time.Now()), err)
		default:
			logf("%s %s renewal: failed at %s: %v", ms(sent), tag, ms(time.Now()), err)
		}
	}
	logf("%s stall m%d", ms(time.Now()), l)
	c.stall(l)
	for end := time.Now().Add(2 * matrixLease); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		renew("stalled")
		if _, err := cand.renew(500 * time.Millisecond); errors.Is(err, driver.ErrExpired) {
			fail("the candidate's session ended during the stall")
		}
		if !holderAlive {
			fail("the holder's session ended during the stall")
		}
	}
	logf("%s resume m%d", ms(time.Now()), l)
	c.resume(l)
	var goneAt time.Time
	var got uint64
	nextRenew := time.Now()
	for end := time.Now().Add(3*matrixLease + 2*time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		select {
		case at := <-gone:
			goneAt = at
			logf("%s poller: the holder's key is gone (belief to %s; %d reads failed, the last at %dms)", ms(at), ms(belief), pollFails.Load(), pollLastFail.Load())
		default:
		}
		if time.Now().After(nextRenew) {
			renew("resumed")
			if _, err := cand.renew(500 * time.Millisecond); errors.Is(err, driver.ErrExpired) {
				// The resumed leader revokes every lease it saw no
				// keepalive for, the candidate's too: a new session.
				logf("%s the candidate's session ended: a new one", ms(time.Now()))
				cand = openOn(t, cb, matrixLease)
			}
			nextRenew = time.Now().Add(300 * time.Millisecond)
		}
		at := time.Now()
		g, _, err := cand.acquire("x")
		if g != 0 {
			got = g
			logf("%s candidate granted x, token %d", ms(at), g)
			if holderAlive || at.Before(belief) {
				fail(fmt.Sprintf("TWO HOLDERS: the candidate was granted x %v before the holder's belief ran out (holder's session alive: %v)", belief.Sub(at), holderAlive))
			}
			break
		}
		if err != nil {
			logf("%s candidate: %v", ms(at), err)
		}
	}
	// The lease was gone by the first of: the poller found the key gone
	// (its reads may fail for a while after the resume, so it is late at
	// worst), the holder's renewal found the lease unknown.
	lost := goneAt
	if !endedAt.IsZero() && (lost.IsZero() || endedAt.Before(lost)) {
		lost = endedAt
	}
	early := !lost.IsZero() && lost.Before(belief)
	if early {
		t.Logf("the holder's etcd lease was gone %v before its belief ran out (etcd-io/etcd#15247); the guard held x\n%s", belief.Sub(lost), strings.Join(lines, "\n"))
	}
	if holderAlive && got != 0 || !holderAlive && got <= tok {
		fail(fmt.Sprintf("after the stall: holder alive %v, candidate's token %d (holder's %d)", holderAlive, got, tok))
	}
	return early
}
