package etcdsimba_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The deployment matrix (docs/deployment/etcd.md) on a private
// three-member cluster: a member killed, the leader killed, the quorum
// lost, a member stalled, compaction and defragmentation. Each checks that
// no name has two holders, that the holder keeps its lease when the
// cluster keeps its quorum, and that tokens keep rising.

const matrixLease = 3 * time.Second

// matrixClient is a client of every member with gRPC keepalives, so that a
// stalled member's connection is found dead within a second (the setting
// docs/deployment/etcd.md asks for).
func matrixClient(t *testing.T, c *privateCluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.endpoints(), DialTimeout: 2 * time.Second, Logger: zapNop,
		DialKeepAliveTime: 500 * time.Millisecond, DialKeepAliveTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

type matrix struct {
	t      *testing.T
	c      *privateCluster
	hb, ob *etcdsimba.Backend
	holder *sessionOn
	other  *sessionOn
	tok    uint64
	// early: the test stalled the leader of an etcd that may commit a
	// deposed leader's revocation of a lease the new leader keeps
	// renewing (etcd-io/etcd#15247, ADR 0290): the holder may lose its
	// session, and only the guard keeps x from a second holder.
	early bool
}

// newMatrix starts a cluster, and a holder of "x" and a candidate, each on
// its own client and backend, with the revoke guard that
// docs/deployment/etcd.md asks for on the etcd versions it names.
func newMatrix(t *testing.T) *matrix {
	c := startPrivate(t, 3)
	ns := newNamespace(t)
	opts := []etcdsimba.Option{etcdsimba.WithMaxLease(matrixLease), etcdsimba.WithRevokeGuard()}
	hb := newBackend(t, matrixClient(t, c), ns, opts...)
	ob := newBackendNoInit(t, matrixClient(t, c), ns, opts...)
	m := &matrix{t: t, c: c, hb: hb, ob: ob, holder: openOn(t, hb, matrixLease), other: openOn(t, ob, matrixLease)}
	m.tok = m.holder.mustAcquire("x")
	return m
}

// keepAlive renews the holder every 300 ms for d, each call bounded by
// 500 ms as the engine bounds them by a renewal period, and fails if a
// whole lease passes without a successful renewal, or the session ends.
func (m *matrix) keepAlive(d time.Duration) {
	m.t.Helper()
	last := []time.Time{time.Now(), time.Now()}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		for i, s := range []*sessionOn{m.holder, m.other} {
			_, err := s.renew(500 * time.Millisecond)
			switch {
			case err == nil:
				last[i] = time.Now()
			case errors.Is(err, driver.ErrExpired):
				m.t.Fatalf("session %d ended: %v", i, err)
			}
			if time.Since(last[i]) > matrixLease-500*time.Millisecond {
				m.t.Fatalf("session %d: no successful renewal for %v (last error %v)", i, time.Since(last[i]), err)
			}
		}
	}
}

// waitHealthy waits for every running member while both sessions are
// renewed every 300 ms, as the engine would renew them: a member that comes
// back may take longer than a lease to catch up, and a lease left alone
// for that long ends on the server whatever the cluster's health.
func (m *matrix) waitHealthy() {
	m.t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_, _ = m.holder.renew(500 * time.Millisecond)
				_, _ = m.other.renew(500 * time.Millisecond)
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()
	m.c.waitHealthy()
}

// checkHeld checks that the candidate cannot take x while the holder owns
// it, then hands x over and checks the token rose. A holder whose session
// ended (only on an etcd that revokes early, after a leader's stall) is
// replaced: the candidate must then be refused x for the guard's delay,
// and granted it afterwards with a higher token.
func (m *matrix) checkHeld() {
	m.t.Helper()
	var tok uint64
	var err error
	ended := false
	for range 20 { // a call may land on a member that is down
		// Renewed as the engine would between attempts.
		if _, herr := m.holder.renew(500 * time.Millisecond); errors.Is(herr, driver.ErrExpired) {
			ended = true
			break
		}
		if _, oerr := m.other.renew(500 * time.Millisecond); errors.Is(oerr, driver.ErrExpired) && m.early {
			m.other = openOn(m.t, m.ob, matrixLease) // revoked by the resumed leader too
		}
		if tok, _, err = m.other.acquire("x"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ended {
		if !m.early {
			m.t.Fatalf("the holder's session ended while the cluster kept its quorum (etcd %s; early revocations only count after a leader's stall)", m.c.version())
		}
		m.t.Logf("the holder's etcd lease was revoked early (etcd-io/etcd#15247 on etcd %s): the revoke guard holds x", m.c.version())
		m.takeOverAfterGuard()
		return
	}
	if err != nil || tok != 0 {
		m.t.Fatalf("candidate's Acquire of a held name: token %d, err %v; want refused", tok, err)
	}
	m.holder.release("x", m.tok)
	got, _, err := m.other.acquire("x")
	if got == 0 && m.early {
		// The revocation may have landed after the holder's last renewal:
		// its release found nothing of its own, and the guard holds x.
		if _, herr := m.holder.renew(time.Second); errors.Is(herr, driver.ErrExpired) {
			m.t.Logf("the holder's etcd lease was revoked early (etcd-io/etcd#15247 on etcd %s), before its release: the revoke guard holds x", m.c.version())
			m.takeOverAfterGuard()
			return
		}
	}
	if err != nil || got <= m.tok {
		m.t.Fatalf("token after the handover %d (err %v), want > %d", got, err, m.tok)
	}
	m.other.release("x", got)
	m.tok = m.holder.mustAcquire("x")
	if m.tok <= got {
		m.t.Fatalf("token after handing back %d, want > %d", m.tok, got)
	}
}

// takeOverAfterGuard: the holder's session ended without a release; the
// candidate is refused x for MaxLease after it finds the key gone, then
// granted it with a higher token, and a new holder session takes it back.
// (That the refusal outlasts the holder's belief is measured to the
// millisecond by TestLeaderStalledTimeline; here the delay may have
// started a little before the holder was told, so only its bulk is
// checked.) The candidate's session may have been revoked with the
// holder's (the resumed leader revokes every lease it saw no keepalive
// for): it then opens a new one.
func (m *matrix) takeOverAfterGuard() {
	m.t.Helper()
	first := time.Now()
	var got uint64
	for end := first.Add(matrixLease + 5*time.Second); got == 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := m.other.renew(500 * time.Millisecond); errors.Is(err, driver.ErrExpired) {
			m.other = openOn(m.t, m.ob, matrixLease)
		}
		got, _, _ = m.other.acquire("x")
		if got != 0 && time.Since(first) < matrixLease/2 {
			m.t.Fatalf("candidate granted x %v after the holder's session ended, inside the guard's delay of %v", time.Since(first), matrixLease)
		}
	}
	if got <= m.tok {
		m.t.Fatalf("candidate's token after the guard's delay %d, want > %d", got, m.tok)
	}
	m.other.release("x", got)
	m.holder = openOn(m.t, m.hb, matrixLease)
	m.tok = m.holder.mustAcquire("x")
	if m.tok <= got {
		m.t.Fatalf("token after handing back %d, want > %d", m.tok, got)
	}
}

func TestMatrixFollowerKilled(t *testing.T) {
	m := newMatrix(t)
	f := (m.c.leader(0) + 1) % 3
	m.c.kill(f)
	m.keepAlive(2 * matrixLease)
	m.checkHeld()
	m.c.start(f)
	m.waitHealthy()
	m.keepAlive(matrixLease)
	m.checkHeld()
}

func TestMatrixLeaderKilled(t *testing.T) {
	m := newMatrix(t)
	l := m.c.leader(0)
	m.c.kill(l)
	// The new leader extends every etcd lease by its TTL when it takes
	// over, so the holder keeps its session through the election.
	m.keepAlive(2 * matrixLease)
	m.checkHeld()
	m.c.start(l)
	m.waitHealthy()
	m.checkHeld()
}

func TestMatrixMemberStalled(t *testing.T) {
	m := newMatrix(t)
	f := (m.c.leader(0) + 1) % 3
	m.c.stall(f)
	m.keepAlive(2 * matrixLease)
	m.checkHeld()
	// Seen in 1 or 2 of 6 runs of the package on 3.4.23: the holder's
	// etcd lease gone at the follower's resume (which forces an election
	// without --pre-vote). Not pinned down (ADR 0290); the guard's check
	// applies as after a leader's stall.
	m.early = etcdsimba.RevokesEarly(m.c.version())
	m.c.resume(f)
	m.waitHealthy()
	m.checkHeld()
}

// TestMatrixLeaderStalled stops the leader for two leases. On every etcd
// but 3.4.31-3.4.33 / 3.5.13-3.5.15 the resumed leader's revocation of the leases it thinks
// expired may be committed by the new leader (etcd-io/etcd#15247, ADR
// 0290; TestLeaderStalledTimeline measures it): the holder's session then
// ends while its belief runs, and the revoke guard must keep x from the
// candidate until it has run out. Measured: 8 of 20 runs on a loaded
// machine; before the guard the candidate was then granted x at once.
func TestMatrixLeaderStalled(t *testing.T) {
	m := newMatrix(t)
	l := m.c.leader(0)
	m.c.stall(l)
	m.keepAlive(2 * matrixLease)
	m.checkHeld()
	m.early = etcdsimba.RevokesEarly(m.c.version())
	m.c.resume(l)
	m.waitHealthy()
	m.checkHeld()
}

// TestMatrixQuorumLost kills two of three members: nothing can be renewed
// or granted, so the holder's belief runs out on its own clock; once the
// quorum is back, whoever holds x holds it alone and tokens keep rising.
func TestMatrixQuorumLost(t *testing.T) {
	m := newMatrix(t)
	l := m.c.leader(0)
	a, b := (l+1)%3, (l+2)%3
	m.c.kill(a)
	m.c.kill(b)
	lost := time.Now()
	for time.Since(lost) < matrixLease {
		if _, err := m.holder.renew(500 * time.Millisecond); err == nil {
			t.Fatalf("Renew %v after losing the quorum succeeded: a renewal must reach the leader of a quorum", time.Since(lost))
		}
		if tok, _, err := m.other.acquire("y"); err == nil && tok != 0 {
			t.Fatalf("Acquire without a quorum granted token %d", tok)
		}
		time.Sleep(300 * time.Millisecond)
	}
	m.c.start(a)
	m.c.start(b)
	m.waitHealthy()
	// The holder's session may have survived (the new leader extends
	// leases) or ended; either way, its term's belief has run out on its
	// clock, and the next term's token is higher.
	next := openOn(t, m.other.b, matrixLease)
	var got uint64
	for end := time.Now().Add(3 * matrixLease); got == 0 && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, err := m.holder.renew(time.Second); err == nil {
			m.holder.release("x", m.tok)
		}
		got, _, _ = next.acquire("x")
	}
	if got <= m.tok {
		t.Fatalf("token after the quorum came back: %d, want > %d", got, m.tok)
	}
}

// TestMatrixCompactionDefrag compacts the whole history and defragments
// every member while a lease is held and a candidate watches: the watch
// keeps delivering, renewals and tokens carry on (they never read old
// revisions).
func TestMatrixCompactionDefrag(t *testing.T) {
	m := newMatrix(t)
	var notices atomic.Int32
	stop, err := m.other.b.Subscribe(func(n driver.Notice) {
		if n.Name == "x" {
			notices.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cli := matrixClient(t, m.c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	for _, ep := range m.c.endpoints() {
		if _, err := cli.Defragment(ctx, ep); err != nil {
			t.Fatalf("defragment %s: %v", ep, err)
		}
	}
	m.keepAlive(matrixLease / 2)
	m.checkHeld() // releases x twice
	for end := time.Now().Add(5 * time.Second); notices.Load() < 2 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := notices.Load(); n < 2 {
		t.Errorf("%d release notices for x after compaction, want 2", n)
	}
}
