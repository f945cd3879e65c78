package etcdsimba_test

import (
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdsimba "github.com/simba-go/simba/backend-etcd"

	"github.com/simba-go/simba/term"
)

// An operator's `etcdctl lease revoke` of a leader's etcd lease, or
// `etcdctl del` of its lease key, frees the name at once: the candidate
// wins through the watch in milliseconds. The old leader hears the same
// delete and renews at once, so its term ends a round trip later instead
// of at its next renewal tick (a third of the lease, 5 s here): the two
// leaders overlap for milliseconds, not seconds (docs/adr/0228). That is
// WithoutRevokeGuard's. By default on an affected etcd (the tests'
// 3.4.23, ADR 0305) the revoke guard cannot tell the operator's
// revocation from a stalled leader's early one: the old leader's term
// still ends at once, and the name stays refused for the guard's delay
// (the session's lease), so they do not overlap at all.
func TestOperatorDeleteEndsTheTermAtOnce(t *testing.T) {
	st, err := newClient(t, single(t)).Status(ctxT(t, 5*time.Second), single(t)[0])
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, g := range []struct {
		name  string
		opts  []etcdsimba.Option
		guard bool
	}{
		{"default", nil, etcdsimba.RevokesEarly(st.Version)},
		{"WithoutRevokeGuard", []etcdsimba.Option{etcdsimba.WithoutRevokeGuard()}, false},
	} {
		t.Run(g.name, func(t *testing.T) { operatorDelete(t, g.guard, g.opts...) })
	}
}

func operatorDelete(t *testing.T, guard bool, opts ...etcdsimba.Option) {
	for _, tc := range []struct {
		name   string
		delete func(t *testing.T, cli *clientv3.Client, ns string, lease clientv3.LeaseID)
		reason term.RevokeReason
	}{
		{"lease revoke", func(t *testing.T, cli *clientv3.Client, _ string, lease clientv3.LeaseID) {
			if _, err := cli.Revoke(ctxT(t, 5*time.Second), lease); err != nil {
				t.Fatal(err)
			}
		}, term.SessionExpired},
		{"del", func(t *testing.T, cli *clientv3.Client, ns string, _ clientv3.LeaseID) {
			if _, err := cli.Delete(ctxT(t, 5*time.Second), ns+"/@simba/l/leader"); err != nil {
				t.Fatal(err)
			}
		}, term.TakenOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startPrivate(t, 1)
			cli := newClient(t, c.endpoints())
			ns := newNamespace(t)
			s1 := openEngine(t, newBackend(t, cli, ns, opts...), 15*time.Second)
			s2 := openEngine(t, newBackendNoInit(t, cli, ns, opts...), 15*time.Second)
			_, won1, lost1 := startElection(t, s1, "leader")
			waitStamped(t, won1, 5*time.Second, "first leader")
			_, won2, _ := startElection(t, s2, "leader")
			time.Sleep(200 * time.Millisecond) // the candidate has tried and waits
			lease, err := parseLease(string(s1.ID()))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			tc.delete(t, cli, ns, lease)
			if guard {
				lost := waitStamped(t, lost1, 5*time.Second, "the old leader's revocation")
				select {
				case next := <-won2:
					t.Fatalf("the candidate won %v after the delete, under the revoke guard (its delay is the 15 s lease)", next.at.Sub(start))
				case <-time.After(2 * time.Second):
				}
				t.Logf("old leader's term ended after %v (%v); no new leader within 2 s", lost.at.Sub(start), lost.reason)
				if d := lost.at.Sub(start); d > time.Second {
					t.Errorf("the old leader's term ended %v after its lease was deleted, want within 1 s", d)
				}
				if lost.reason != tc.reason {
					t.Errorf("revoked with %v, want %v", lost.reason, tc.reason)
				}
				return
			}
			next := waitStamped(t, won2, 5*time.Second, "the candidate's term")
			lost := waitStamped(t, lost1, 5*time.Second, "the old leader's revocation")
			t.Logf("new leader after %v, old leader's term ended after %v (%v)", next.at.Sub(start), lost.at.Sub(start), lost.reason)
			if d := lost.at.Sub(start); d > time.Second {
				t.Errorf("the old leader's term ended %v after its lease was deleted, want within 1 s (its next renewal tick is 5 s away)", d)
			}
			if lost.reason != tc.reason {
				t.Errorf("revoked with %v, want %v", lost.reason, tc.reason)
			}
		})
	}
}

// parseLease reads a session id (the etcd lease id in 16 hex digits).
func parseLease(id string) (clientv3.LeaseID, error) {
	v, err := strconv.ParseUint(id, 16, 64)
	return clientv3.LeaseID(v), err
}
