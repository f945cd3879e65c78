package simbatest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
)

// RedisServer is a running Redis, standalone or a Cluster of three masters.
type RedisServer struct {
	// Nodes are the servers (one, or the Cluster's three masters).
	Nodes []*Node
	// Client is a client of the server (a cluster client for a Cluster).
	Client redis.UniversalClient
	// Backend is a Simba backend on Client, in the server's namespace.
	Backend *redissimba.Backend
	// Namespace is the backends' key namespace.
	Namespace string
}

// Addrs are the nodes' addresses.
func (s *RedisServer) Addrs() []string { return addrs(s.Nodes) }

// NewClient returns a new client of the server, closed with the test.
func (s *RedisServer) NewClient(t testing.TB) redis.UniversalClient {
	var c redis.UniversalClient
	if len(s.Nodes) > 1 {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs(), ContextTimeoutEnabled: true})
	} else {
		c = redis.NewClient(&redis.Options{Addr: s.Nodes[0].Addr, ContextTimeoutEnabled: true})
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewBackend returns another backend in the same namespace on a new client:
// another process of the application under test.
func (s *RedisServer) NewBackend(t testing.TB) *redissimba.Backend {
	t.Helper()
	b, err := redissimba.New(s.NewClient(t), s.Namespace)
	if err != nil {
		t.Fatalf("simbatest: redis backend: %v", err)
	}
	return b
}

// Redis starts Redis (official image redis:7, or SIMBA_TEST_IMAGE) and
// returns it ready, with a client and a backend, its namespace initialised
// (Backend.Init), so the first Acquire grants at once; WithCluster starts a
// three-master Cluster instead. Everything is removed when the test ends.
func Redis(t testing.TB, opts ...Option) *RedisServer {
	t.Helper()
	c := newConfig(t, "redis", "7", opts)
	n := c.nodes()
	// A Cluster node's bus port is chosen too: its default, the client
	// port + 10000, falls in the ephemeral range, where an outgoing
	// connection's local port can hold it (seen in CI: "bind: Address
	// already in use" on the bus).
	ps, err := freePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	s := &RedisServer{Namespace: c.namespace}
	for i, p := range ps[:n] {
		cmd := []string{"redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(p), "--save", "", "--appendonly", "no", "--protected-mode", "no"}
		if c.cluster {
			cmd = append(cmd, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(ps[n+i]),
				"--cluster-config-file", "/tmp/nodes-"+strconv.Itoa(p)+".conf", "--cluster-node-timeout", "5000")
		}
		a := addr(p)
		s.Nodes = append(s.Nodes, run(t, c, spec{cmd: cmd}, a, func(ctx context.Context) error { return redisPing(ctx, a) }))
	}
	mustReady(t, s.Nodes...)
	if c.cluster {
		create := append([]string{"redis-cli", "--cluster", "create"}, s.Addrs()...)
		create = append(create, "--cluster-replicas", "0", "--cluster-yes")
		if out, err := s.Nodes[0].Exec(context.Background(), create...); err != nil {
			t.Fatalf("simbatest: creating the cluster: %v\n%s", err, out)
		}
		// From now on a node is ready when the whole cluster is.
		for _, nd := range s.Nodes {
			nd.ready = func(ctx context.Context) error { return clusterOK(ctx, s.Addrs()) }
		}
		mustReady(t, s.Nodes[0])
	}
	s.Client = s.NewClient(t)
	s.Backend = s.NewBackend(t)
	// The servers are new, so is the namespace: create its epoch record,
	// or the first Acquire would start a quarantine of one maximum lease
	// (ADR 0130). ForceInit: Init refuses on a server started less than a
	// maximum lease ago (ADR 0165), and these were started just now.
	// Backends from NewBackend share it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Backend.ForceInit(ctx); err != nil {
		t.Fatalf("simbatest: redis: %v", err)
	}
	return s
}

func redisPing(ctx context.Context, a string) error {
	c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// clusterOK: every node reports a complete cluster of exactly these nodes
// with all 16384 slots assigned.
func clusterOK(ctx context.Context, as []string) error {
	for _, a := range as {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		_ = c.Close()
		if err != nil {
			return err
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", fmt.Sprintf("cluster_known_nodes:%d", len(as))} {
			if !strings.Contains(info, want) {
				return fmt.Errorf("%s: cluster info lacks %s", a, want)
			}
		}
	}
	return nil
}

func addrs(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Addr
	}
	return out
}
