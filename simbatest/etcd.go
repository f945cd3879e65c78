package simbatest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
)

// EtcdServer is a running etcd, one member or a cluster of three.
type EtcdServer struct {
	// Nodes are the members; Addr is each one's client address.
	Nodes []*Node
	// Client is a client of every member, closed with the test.
	Client *clientv3.Client
	// Backend is a Simba backend on Client under Prefix(), initialised
	// (etcdsimba.Backend.Init): a new namespace, so its first use is
	// not quarantined. It has etcdsimba's defaults: on the Debian image's
	// etcd 3.4.23 the revoke guard is on (ADR 0305), so a name whose
	// holder's session expired comes free one lease later than the
	// expiry; NewBackend takes etcdsimba.WithoutRevokeGuard for a test that
	// needs it at once.
	Backend *etcdsimba.Backend
	// Namespace names the test's keys: they live under Prefix().
	Namespace string
}

// Endpoints are the members' client addresses.
func (s *EtcdServer) Endpoints() []string { return addrs(s.Nodes) }

// Prefix is the backends' key prefix, /simbatest/<namespace>.
func (s *EtcdServer) Prefix() string { return "/simbatest/" + s.Namespace }

// NewClient returns a new client of every member, closed with the test:
// another process's connection. Its keepalive finds a stopped member's
// connection dead within seconds, as docs/deployment/etcd.md advises.
func (s *EtcdServer) NewClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := etcdClient(s.Endpoints())
	if err != nil {
		t.Fatalf("simbatest: etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// NewBackend returns another backend under the same prefix on a new
// client: another process of the application under test. The prefix is
// already initialised.
func (s *EtcdServer) NewBackend(t testing.TB, opts ...etcdsimba.Option) *etcdsimba.Backend {
	t.Helper()
	return s.newBackend(t, s.NewClient(t), opts...)
}

func (s *EtcdServer) newBackend(t testing.TB, cli *clientv3.Client, opts ...etcdsimba.Option) *etcdsimba.Backend {
	t.Helper()
	b, err := etcdsimba.New(cli, s.Prefix(), opts...)
	if err != nil {
		t.Fatalf("simbatest: etcd backend: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	return b
}

// Leader returns the member that leads the cluster (the only member of a
// single node), or nil if none answers that it leads. Each member has 2 s
// to answer: a stopped one would otherwise hold the call until ctx ends.
func (s *EtcdServer) Leader(ctx context.Context) *Node {
	for _, n := range s.Nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := etcdStatus(cctx, n.Addr)
		cancel()
		if err == nil && st.Header.MemberId == st.Leader {
			return n
		}
	}
	return nil
}

// etcdOfficialBinary is the server's path in the official image
// (gcr.io/etcd-development/etcd, distroless: no shell); Debian's package
// puts etcd on PATH.
const etcdOfficialBinary = "/usr/local/bin/etcd"

// Etcd starts etcd (official image gcr.io/etcd-development/etcd:v3.5.17,
// or SIMBA_TEST_IMAGE, whose Debian package is etcd 3.4) and returns it
// ready, with a client and a backend; WithCluster starts a cluster of three
// members instead. Everything is removed when the test ends.
//
// Each member keeps its data in its container, so Node.Stop and Node.Start
// (or Kill and Start) restart it with its data, as a real member restarts.
// Elections use etcd's defaults (100 ms heartbeats, 1 s election timeout);
// the shortest etcd lease is then 2 s.
func Etcd(t testing.TB, opts ...Option) *EtcdServer {
	t.Helper()
	c := newConfig(t, "gcr.io/etcd-development/etcd", "v3.5.17", opts)
	n := c.nodes()
	ps, err := freePorts(2 * n) // client and peer ports
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ps[n+i]))
	}
	bin := "etcd"
	if c.flavour == official {
		bin = etcdOfficialBinary
	}
	// A token of its own: a member of another test's cluster that reached
	// this one's peer port by mistake is refused.
	token := "simbatest-" + c.namespace
	s := &EtcdServer{Namespace: c.namespace}
	for i := range n {
		a := addr(ps[i])
		peer := "http://" + addr(ps[n+i])
		cmd := []string{bin,
			"--name", "m" + strconv.Itoa(i),
			"--data-dir", "/tmp/etcd-" + strconv.Itoa(ps[i]),
			"--listen-client-urls", "http://" + a, "--advertise-client-urls", "http://" + a,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", token,
			"--log-level", "warn",
		}
		s.Nodes = append(s.Nodes, run(t, c, spec{cmd: cmd}, a, func(ctx context.Context) error { return etcdReady(ctx, a, n) }))
	}
	mustReady(t, s.Nodes...)
	s.Client = s.NewClient(t)
	s.Backend = s.newBackend(t, s.Client)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Init: the namespace is new, so its first use is not quarantined
	// (unlike Redis and ZooKeeper, etcd's Init has no server-age rule to
	// force past: the revision history tells a new store).
	if err := s.Backend.Init(ctx); err != nil {
		t.Fatalf("simbatest: etcd: init %s: %v", s.Prefix(), err)
	}
	return s
}

// etcdClient is a client of eps with keepalives (a stopped member's
// connection is found dead in seconds) and without the client's own log.
func etcdClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// etcdStatus asks one member for its status, through a client of that
// member alone.
func etcdStatus(ctx context.Context, a string) (*clientv3.StatusResponse, error) {
	cli, err := etcdClient([]string{a})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	return cli.Status(ctx, a)
}

// etcdReady: the member answers, knows a leader, and its cluster has all
// n members; a linearizable read through it then succeeds (the leader
// commits).
func etcdReady(ctx context.Context, a string, n int) error {
	cli, err := etcdClient([]string{a})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	st, err := cli.Status(ctx, a)
	if err != nil {
		return err
	}
	if st.Leader == 0 {
		return fmt.Errorf("etcd on %s: no leader yet", a)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	if len(ml.Members) != n {
		return fmt.Errorf("etcd on %s: %d members, want %d", a, len(ml.Members), n)
	}
	_, err = cli.Get(ctx, "/simbatest-ready")
	return err
}
