package redissimba_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	redissimba "github.com/simba-go/simba/backend-redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Environment variables naming the servers (scripts/services.sh sets them).
const (
	envAddr    = "SIMBA_REDIS_ADDR"
	envCluster = "SIMBA_REDIS_CLUSTER_ADDRS"
)

// standalone returns a client of the standalone Redis, closed at cleanup.
// A missing server fails the test naming the variable: these tests never
// skip.
func standalone(t testing.TB) redis.UniversalClient {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Fatalf("%s is not set: run ./scripts/services.sh start and source .services/env", envAddr)
	}
	return dial(t, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), envAddr)
}

// cluster returns a client of the three-master Redis Cluster.
func cluster(t testing.TB) redis.UniversalClient {
	t.Helper()
	addrs := os.Getenv(envCluster)
	if addrs == "" {
		t.Fatalf("%s is not set: run ./scripts/services.sh start and source .services/env", envCluster)
	}
	return dial(t, redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true,
	}), envCluster)
}

func dial(t testing.TB, c redis.UniversalClient, env string) redis.UniversalClient {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis named by %s does not answer: %v", env, err)
	}
	return c
}

// mode is one deployment the same test body runs against.
type mode struct {
	name   string
	client func(testing.TB) redis.UniversalClient
}

var modes = []mode{{"standalone", standalone}, {"cluster", cluster}}

// forModes runs body once per deployment, as net/http's tests run one body
// under HTTP/1 and HTTP/2.
func forModes(t *testing.T, body func(t *testing.T, c redis.UniversalClient)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { body(t, m.client(t)) })
	}
}

// namespace returns a fresh namespace, so tests sharing a server never see
// each other.
func namespace(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t-" + hex.EncodeToString(b[:])
}

// newBackend returns a backend on c in namespace ns, initialised
// (ForceInit): every test namespace is new, so its first use needs no
// quarantine, which Init may not see on a server the test just started.
func newBackend(t testing.TB, c redis.UniversalClient, ns string, opts ...redissimba.Option) *redissimba.Backend {
	t.Helper()
	b := newUninitialised(t, c, ns, opts...)
	if err := b.ForceInit(ctxT(t)); err != nil {
		t.Fatalf("ForceInit(%q) = %v", ns, err)
	}
	return b
}

// newUninitialised is newBackend without Init: the namespace's first
// Acquire starts a quarantine.
func newUninitialised(t testing.TB, c redis.UniversalClient, ns string, opts ...redissimba.Option) *redissimba.Backend {
	t.Helper()
	// The test servers run without persistence on purpose: quiet the
	// server check's warnings (check_test.go checks them).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := redissimba.New(c, ns, append([]redissimba.Option{redissimba.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%q) = %v", ns, err)
	}
	return b
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitTimer blocks for d of real time: for expiry on the server's clock
// there is no event to wait on, so tests wait a timer sized from the lease
// and then assert.
func waitTimer(d time.Duration) {
	<-time.After(d)
}
