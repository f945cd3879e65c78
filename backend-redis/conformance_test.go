package redissimba_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// kitLease is the lease the conformance kit asks for.
const kitLease = 2 * time.Second

// kitLockDelay is the backends' maximum lock-delay in the kit (ADR 0246).
const kitLockDelay = 1500 * time.Millisecond

// kitConfig runs the kit with one new Redis client (and Backend) per kit
// client, as separate processes would have. dial returns a new client.
// Backends cap leases at the kit's lease (so a quarantine lasts one kit
// lease, plus the maximum lock-delay), and the kit initialises each namespace with Init before its
// first client, except in the case that checks a new namespace's
// quarantine.
func kitConfig(dial func(t *testing.T) redis.UniversalClient) backendtest.Config {
	return backendtest.Config{
		NewBackend: func(t *testing.T, ns string) driver.Backend {
			return newUninitialised(t, dial(t), ns, redissimba.WithMaxLease(kitLease), redissimba.WithMaxLockDelay(kitLockDelay))
		},
		Lease:        kitLease,
		MaxLease:     kitLease,
		MaxLockDelay: kitLockDelay,
		Init: func(t *testing.T, ns string) {
			newBackend(t, dial(t), ns) // newBackend calls Init
		},
	}
}

// deleteKitKeys deletes every key of the kit's namespaces ("kt…"): the
// data loss a restart without persistence causes, limited to the kit so
// that the shared server's other users keep their data.
func deleteKitKeys(ctx context.Context, c *redis.Client) error {
	iter := c.Scan(ctx, 0, "simba:{kt*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func TestConformanceStandalone(t *testing.T) {
	cfg := kitConfig(func(t *testing.T) redis.UniversalClient { return standalone(t) })
	cfg.LoseData = func(t *testing.T) {
		if err := deleteKitKeys(ctxT(t), standalone(t).(*redis.Client)); err != nil {
			t.Fatalf("losing data: %v", err)
		}
	}
	backendtest.Run(t, cfg)
}

func TestConformanceCluster(t *testing.T) {
	cfg := kitConfig(func(t *testing.T) redis.UniversalClient { return cluster(t) })
	cfg.LoseData = func(t *testing.T) {
		if err := cluster(t).(*redis.ClusterClient).ForEachMaster(ctxT(t), deleteKitKeys); err != nil {
			t.Fatalf("losing data: %v", err)
		}
	}
	backendtest.Run(t, cfg)
}

// TestConformanceRestartedServer runs the kit on a private redis-server
// whose data loss is a real restart without persistence.
func TestConformanceRestartedServer(t *testing.T) {
	s := startServer(t)
	cfg := kitConfig(func(t *testing.T) redis.UniversalClient { return s.client(s.addr()) })
	cfg.LoseData = func(t *testing.T) { s.restartEmpty() }
	backendtest.Run(t, cfg)
}

// TestConformanceSentinel runs the kit through a Sentinel failover client
// (go-redis asks the Sentinel for the master), on a private master and
// Sentinel. The kit's clients share one failover client, each with its own
// Backend (and so its own subscription): creating a fresh failover client
// per kit client sometimes took 2 s inside go-redis, longer than the
// kit's racing case lets its sessions live unrenewed.
func TestConformanceSentinel(t *testing.T) {
	master := startServer(t)
	sentinel := startSentinel(t, master)
	c := dial(t, redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "m", SentinelAddrs: []string{sentinel.addr()}, ContextTimeoutEnabled: true,
	}), "the private Sentinel")
	cfg := kitConfig(func(*testing.T) redis.UniversalClient { return c })
	cfg.LoseData = func(t *testing.T) { master.restartEmpty() }
	backendtest.Run(t, cfg)
}

// TestNewAcceptsUniversalClient checks that the client
// redis.NewUniversalClient builds (what applications that may use Sentinel
// or Cluster call) is accepted.
func TestNewAcceptsUniversalClient(t *testing.T) {
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Fatalf("%s is not set: run ./scripts/services.sh start and source .services/env", envAddr)
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(addr, ","), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := redissimba.New(c, "universal"); err != nil {
		t.Fatalf("New(NewUniversalClient) = %v", err)
	}
}
