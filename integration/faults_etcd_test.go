package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/integration/faultcheck"
	"github.com/simba-go/simba/simbatest"
)

// The etcd deployments of the fault runs (ADR 0310): one member
// (`etcd`), and three (`etcd-cluster`), in simbatest's containers (with
// SIMBA_TEST_IMAGE, Debian's etcd 3.4.23, affected by etcd-io/etcd#15247:
// the workers run etcdsimba.WithRevokeGuard). Workers dial every member
// through proxies of their own, so the link faults apply to both.

// etcdPrefix is the workers' namespace (simba-worker's etcdPrefix).
func etcdPrefix(r *rig) string { return "/chaos/" + r.ns }

// etcdInit initialises the workers' new namespace, once, before they
// start: a worker must not (a restarted worker's Init after a prefix
// deletion would skip that loss's quarantine).
func etcdInit(t *testing.T, s *simbatest.EtcdServer, r *rig) {
	t.Helper()
	b, err := etcdsimba.New(s.Client, etcdPrefix(r), etcdsimba.WithMaxLease(faultLease), etcdsimba.WithRevokeGuard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	defer func() { _ = b.Shutdown(ctx) }()
	if err := b.Init(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcdDelPrefix deletes every key of the namespace in one DeleteRange, as
// an operator's `etcdctl del --prefix <ns>/@simba/` does (the wipe
// docs/deployment/etcd.md names): the epoch, every term's key and
// lock-delay marker go at one revision while every etcd lease lives on.
// Each worker's next request compares the epoch, finds it gone, and the
// namespace must be quarantined for one MaxLease (ADR 0211).
func etcdDelPrefix(s *simbatest.EtcdServer) fault {
	return fault{"etcd-del-prefix", func(ctx context.Context, r *rig) error {
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: "all", T: faultcheck.Now(), Reason: "etcd-del-prefix"})
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := s.Client.Delete(ctx, etcdPrefix(r)+"/@simba/", clientv3.WithPrefix())
		return err
	}}
}

// etcdKill kills the single member (SIGKILL: no shutdown, its data is what
// it had fsynced) and starts it again after half a lease to a lease and
// a half.
func etcdKill(n *simbatest.Node, name string) fault {
	return fault{name, func(ctx context.Context, r *rig) error {
		r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: n.Addr, T: faultcheck.Now(), Reason: name})
		if err := n.Kill(ctx); err != nil {
			return err
		}
		sleep(ctx, leases(0.5, 1.5))
		return n.Start(ctx)
	}}
}

func setupEtcd(t *testing.T, r *rig) ([]string, bool) {
	s := simbatest.Etcd(t)
	etcdInit(t, s, r)
	r.faults = append(r.faults, serverRestart(func() *simbatest.Node { return s.Nodes[0] }),
		etcdKill(s.Nodes[0], "etcd-kill"), etcdDelPrefix(s))
	return s.Endpoints(), true
}

// etcdRoles returns the cluster's leader and its followers, waiting up to
// 30 s for one that every running member answers about (a fault's
// recovery may still be electing).
func etcdRoles(ctx context.Context, s *simbatest.EtcdServer) (*simbatest.Node, []*simbatest.Node, error) {
	var l *simbatest.Node
	if err := poll(ctx, 30*time.Second, func() bool { l = s.Leader(ctx); return l != nil }); err != nil {
		return nil, nil, fmt.Errorf("etcd cluster leader: %w", err)
	}
	var fs []*simbatest.Node
	for _, n := range s.Nodes {
		if n != l {
			fs = append(fs, n)
		}
	}
	return l, fs, nil
}

// etcdStall stops (SIGSTOP) every process of n's container for d and
// resumes it (SIGCONT): the member keeps its sockets open and answers
// nothing, as in a long GC or VM pause.
func etcdStall(ctx context.Context, n *simbatest.Node, d time.Duration) error {
	st, err := n.Container.State(ctx)
	if err != nil {
		return err
	}
	pids := processTree(st.Pid)
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			// Signalling a container's processes needs the rights of their
			// owner (root with a rootful Docker).
			errs = append(errs, fmt.Errorf("SIGSTOP %d (%s): %w", p, n.Addr, err))
		}
	}
	if len(errs) == 0 {
		sleep(ctx, d)
	}
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGCONT); err != nil {
			errs = append(errs, fmt.Errorf("SIGCONT %d (%s): %w", p, n.Addr, err))
		}
	}
	return errors.Join(errs...)
}

// startAll starts the stopped members at once: a member of a cluster
// without its quorum is ready only when the others are.
func startAll(ctx context.Context, ns ...*simbatest.Node) error {
	errs := make([]error, len(ns))
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setupEtcdCluster: three members; the faults are what happens to an etcd
// cluster's members (ADR 0310): a follower killed, the leader killed, the
// leader stalled past the lease (on every etcd but 3.4.31-3.4.33 / 3.5.13-3.5.15 its
// resume may revoke every session early, etcd-io/etcd#15247: the revoke
// guard must keep the names), a follower stalled (the quorum stays: the
// leader's term should survive, requests hedged around the member), the
// quorum lost (two members killed: no renewal, every belief runs out on
// its own clock) and back, and the prefix deleted.
func setupEtcdCluster(t *testing.T, r *rig) ([]string, bool) {
	s := simbatest.Etcd(t, simbatest.WithCluster())
	etcdInit(t, s, r)
	kill := func(name string, pick func(l *simbatest.Node, fs []*simbatest.Node) []*simbatest.Node, lo, hi float64) fault {
		return fault{name, func(ctx context.Context, r *rig) error {
			l, fs, err := etcdRoles(ctx, s)
			if err != nil {
				return err
			}
			ns := pick(l, fs)
			r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: ns[0].Addr, T: faultcheck.Now(), Reason: name})
			for _, n := range ns {
				if err := n.Kill(ctx); err != nil {
					return err
				}
			}
			sleep(ctx, leases(lo, hi))
			return startAll(ctx, ns...)
		}}
	}
	stall := func(name string, pick func(l *simbatest.Node, fs []*simbatest.Node) *simbatest.Node) fault {
		return fault{name, func(ctx context.Context, r *rig) error {
			l, fs, err := etcdRoles(ctx, s)
			if err != nil {
				return err
			}
			n := pick(l, fs)
			r.record(faultcheck.Event{Kind: faultcheck.Fault, Worker: n.Addr, T: faultcheck.Now(), Reason: name})
			return etcdStall(ctx, n, leases(1.5, 3))
		}}
	}
	follower := func(_ *simbatest.Node, fs []*simbatest.Node) *simbatest.Node { return fs[rand.IntN(len(fs))] }
	r.faults = append(r.faults,
		kill("etcd-member-kill", func(l *simbatest.Node, fs []*simbatest.Node) []*simbatest.Node {
			return []*simbatest.Node{follower(l, fs)}
		}, 1, 2),
		kill("etcd-leader-kill", func(l *simbatest.Node, _ []*simbatest.Node) []*simbatest.Node { return []*simbatest.Node{l} }, 1, 2),
		// Two members of three, at random (the leader among them or not):
		// the one left has no quorum until both are back.
		kill("etcd-quorum-loss", func(l *simbatest.Node, fs []*simbatest.Node) []*simbatest.Node {
			all := append([]*simbatest.Node{l}, fs...)
			rand.Shuffle(len(all), func(a, b int) { all[a], all[b] = all[b], all[a] })
			return all[:2]
		}, 1.5, 3),
		stall("etcd-leader-stall", func(l *simbatest.Node, _ []*simbatest.Node) *simbatest.Node { return l }),
		stall("etcd-follower-stall", follower),
		etcdDelPrefix(s))
	return s.Endpoints(), true
}
