package zksimba_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// The ZooKeeper deployment matrix (issue 21; docs/deployment/zookeeper.md):
// what operators do to an ensemble, on one private three-node ensemble
// shared by the rows (a JVM start costs seconds) and healed after each.
// In every row a holder and a candidate on other Backend values claim the
// same name: the candidate never wins while the holder's term is valid,
// and tokens only rise. The row that rebuilds the ensemble from empty
// disks comes last.
func TestZooKeeperDeploymentMatrix(t *testing.T) {
	zks := startZK(t, 3)
	rows := []struct {
		name string
		f    func(*testing.T, []*zkServer)
	}{
		{"follower_stalled", followerStalled},
		{"follower_killed", serverLostWatchSurvives},
		{"leader_killed", leaderKilled},
		{"quorum_lost", quorumLost},
		{"data_wiped", dataWiped},
	}
	for _, r := range rows {
		if !t.Run(r.name, func(t *testing.T) { r.f(t, zks) }) {
			return // a later row on a broken ensemble would say nothing
		}
		heal(t, zks)
	}
}

// openOnFollower opens an engine session whose connection is to a
// follower of the ensemble (go-zookeeper picks a server at random: a
// session on the leader is closed and another opened).
func openOnFollower(t *testing.T, zks []*zkServer, root string, timeout time.Duration) (*session.Session, events, *zkServer) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		s, ev := openEngine(t, newBackend(t, addrs(zks), root), timeout)
		var z *zkServer
		waitUntil(t, 10*time.Second, "the server of the session", func() bool {
			z = serverOf(zks, s.ID())
			return z != nil
		})
		if z.mode() == "follower" {
			return s, ev, z
		}
		_ = s.Close()
	}
	t.Fatal("no session landed on a follower in 20 attempts")
	return nil, nil, nil
}

// contend starts a candidate for name on a Backend of its own.
func contend(t *testing.T, srv []string, root, name string, timeout time.Duration, opts ...zksimba.Option) *claimRec {
	t.Helper()
	s, _ := openEngine(t, newBackendNoInit(t, srv, root, opts...), timeout)
	return claimName(t, s, name)
}

// notWon fails if the candidate won a term.
func notWon(t *testing.T, c *claimRec, while string) {
	t.Helper()
	select {
	case w := <-c.won:
		t.Fatalf("the candidate won (token %d) %s, while the holder's term was valid", w.t.Token(), while)
	default:
	}
}

// renewedPast waits for a renewal sent later than at.
func renewedPast(t *testing.T, ev events, at time.Time, within time.Duration) {
	t.Helper()
	for {
		if e := ev.next(t, session.SessionRenewed, within); e.Time.After(at) {
			return
		}
	}
}

// Issue 21.3: the follower the holder is connected to is stopped
// (SIGSTOP: its sockets stay open, it answers nothing). The rest of the
// ensemble has a quorum, so the term must survive: the backend sees its
// requests go unanswered, closes the connection well before
// go-zookeeper's own receive timeout (2/3 of the session timeout, past
// the grant), and the session moves to another server with its id and
// its term. Before ADR 0177 the term ended with DEADLINE_PASSED.
func followerStalled(t *testing.T, zks []*zkServer) {
	const timeout = 3 * time.Second // grant 1.25 s; go-zookeeper's own receive timeout 2 s
	root := newRoot(t)
	s, ev, fol := openOnFollower(t, zks, root, timeout)
	r := claimName(t, s, "x")
	won := r.waitWon(t, 5*time.Second)
	cand := contend(t, addrs(zks), root, "x", timeout)
	id := s.ID()

	fol.pause()
	pausedAt := time.Now()
	// A renewal sent after the pause's last possible deadline proves the
	// term outlived it: one grant after the pause, no renewal sent before
	// it still covers the term.
	renewedPast(t, ev, pausedAt.Add(zksimba.Grant(timeout)), 2*timeout)
	select {
	case l := <-r.lost:
		t.Fatalf("term ended with %v %v after the follower was stopped, although the ensemble had a quorum", l.reason, l.at.Sub(pausedAt))
	default:
	}
	notWon(t, cand, "after the follower was stopped")
	if s.ID() != id {
		t.Fatalf("session id changed from %s to %s: the session did not move", id, s.ID())
	}
	if !won.t.Valid() {
		t.Fatal("term not valid after the follower was stopped")
	}
	var now *zkServer
	for _, z := range zks {
		if z != fol && serverOf([]*zkServer{z}, id) != nil {
			now = z
		}
	}
	if now == nil {
		t.Fatal("the session is on no running server")
	}
	t.Logf("session moved from server %d to %d; term alive %v after the stop", fol.id, now.id, time.Since(pausedAt))
}

// The leader is killed while a term is held. The ensemble elects another
// within the session timeout: the session survives with its id and its
// term, and the candidate does not win.
func leaderKilled(t *testing.T, zks []*zkServer) {
	const timeout = 10 * time.Second // grant 4.17 s: room for an election
	root := newRoot(t)
	s, ev := openEngine(t, newBackend(t, addrs(zks), root), timeout)
	r := claimName(t, s, "x")
	won := r.waitWon(t, 5*time.Second)
	cand := contend(t, addrs(zks), root, "x", timeout)
	id := s.ID()

	leader(t, zks).kill()
	killedAt := time.Now()
	renewedPast(t, ev, killedAt, timeout)
	t.Logf("renewed %v after the leader was killed", time.Since(killedAt))
	if s.ID() != id {
		t.Fatalf("session id changed from %s to %s: the session did not survive", id, s.ID())
	}
	select {
	case l := <-r.lost:
		t.Fatalf("term ended (%v) although the ensemble recovered within the timeout", l.reason)
	default:
	}
	notWon(t, cand, "after the leader was killed")
	if !won.t.Valid() {
		t.Fatal("term not valid after recovery")
	}
	for {
		select {
		case e := <-ev:
			if e.Kind == session.SessionExpired {
				t.Fatalf("SessionExpired after a recovered leader failure: %+v", e)
			}
			continue
		default:
		}
		break
	}
}

// The leader and a follower are killed: no quorum. The term ends at the
// local deadline (within one grant of the last renewal), before the
// session could expire; once the quorum is back, the next term (the
// holder's or the candidate's) begins after it ended, with a higher token.
func quorumLost(t *testing.T, zks []*zkServer) {
	const timeout = 4 * time.Second
	root := newRoot(t)
	s, _ := openEngine(t, newBackend(t, addrs(zks), root), timeout)
	r := claimName(t, s, "y")
	won := r.waitWon(t, 10*time.Second)
	cand := contend(t, addrs(zks), root, "y", timeout)
	l := leader(t, zks)
	for _, z := range zks {
		if z != l {
			z.kill() // one follower: with the leader, the quorum is gone
			break
		}
	}
	l.kill()
	killedAt := time.Now()
	lost := r.waitLost(t, timeout)
	if lost.reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v, want DEADLINE_PASSED", lost.reason)
	}
	if el := lost.at.Sub(killedAt); el > zksimba.Grant(timeout)+200*time.Millisecond {
		t.Fatalf("term ended %v after quorum loss, want within one grant (%v)", el, zksimba.Grant(timeout))
	}
	if won.t.Valid() {
		t.Fatal("term still valid after its end")
	}
	notWon(t, cand, "without a quorum")

	heal(t, zks)
	var next stamped
	select {
	case next = <-r.won:
	case next = <-cand.won:
	case <-time.After(6 * timeout):
		t.Fatalf("no new term within %v of the quorum's return", 6*timeout)
	}
	if !next.at.After(lost.at) || next.t.Token() <= won.t.Token() {
		t.Fatalf("next term at %v (token %d); want after the old one ended (%v) with a token above %d", next.at, next.t.Token(), lost.at, won.t.Token())
	}
}

// Every server's data directory wiped and the ensemble restarted: the
// namespace's records are gone. The holder's term ends; Init is refused
// (the ensemble holds no node older than MaxLease), or finds the epoch a
// first Open made, in quarantine; the next term comes one MaxLease after
// the ensemble is back, with a higher token.
func dataWiped(t *testing.T, zks []*zkServer) {
	const lease, maxLease = 2 * time.Second, 2 * time.Second
	opt := zksimba.WithMaxLease(maxLease)
	root := newRoot(t)
	s, _ := openEngine(t, newBackend(t, addrs(zks), root, opt), lease)
	r := claimName(t, s, "z")
	won := r.waitWon(t, 5*time.Second)
	cand := contend(t, addrs(zks), root, "z", lease, opt)

	for _, z := range zks {
		z.kill()
	}
	for _, z := range zks {
		must(t, os.RemoveAll(filepath.Join(z.dir, "data", "version-2")))
	}
	lost := r.waitLost(t, 2*lease)
	notWon(t, cand, "while the ensemble was down")
	heal(t, zks)
	backAt := time.Now()

	err := newBackendNoInit(t, addrs(zks), root, opt).Init(ctxT(t, 10*time.Second))
	if err != nil && !errors.Is(err, driver.ErrInitUnsafe) {
		t.Fatalf("Init on the rebuilt ensemble = %v, want ErrInitUnsafe or nil (an epoch in quarantine exists)", err)
	}
	if err := newBackendNoInit(t, addrs(zks), newRoot(t), opt).Init(ctxT(t, 10*time.Second)); !errors.Is(err, driver.ErrInitUnsafe) {
		t.Fatalf("Init of a new namespace on the rebuilt ensemble = %v, want ErrInitUnsafe", err)
	}
	var next stamped
	select {
	case next = <-r.won:
	case next = <-cand.won:
	case <-time.After(10 * maxLease):
		t.Fatalf("no new term within %v of the rebuild", 10*maxLease)
	}
	if el := next.at.Sub(backAt); el < maxLease-200*time.Millisecond {
		t.Fatalf("new term %v after the ensemble was back, before one MaxLease (%v): no quarantine", el, maxLease)
	}
	if !next.at.After(lost.at) || next.t.Token() <= won.t.Token() {
		t.Fatalf("next term at %v (token %d); want after the old one ended (%v) with a token above %d", next.at, next.t.Token(), lost.at, won.t.Token())
	}
	t.Logf("old term ended %v (%v); new term %v after the ensemble was back, token %d > %d", lost.at.Sub(backAt), lost.reason, next.at.Sub(backAt), next.t.Token(), won.t.Token())
}
