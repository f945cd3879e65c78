package redissimba_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
)

// The fenced set in the deployment matrix (issue 21).

// TestFencedSetUnderEviction: the fenced set under each eviction policy
// with a memory limit (issue 21's matrix for the fencing helper). The
// fence key has no TTL: a volatile-* policy never evicts it, and a lower
// token stays refused under memory pressure. An allkeys-* policy may evict
// it, after which a lower token would pass: FencedSet refuses there with
// ErrServerUnsafe naming the policy, before writing.
func TestFencedSetUnderEviction(t *testing.T) {
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			s := startServer(t, "--maxmemory-policy", policy, "--maxmemory", "64mb")
			c := s.client(s.addr())
			set := func(tok uint64) error {
				return redissimba.FencedSet(ctxT(t), c, "{o}:fence", "{o}:data", tok, "v", 0)
			}
			err := set(10)
			if strings.HasPrefix(policy, "allkeys-") {
				if !errors.Is(err, redissimba.ErrServerUnsafe) || !strings.Contains(err.Error(), policy) {
					t.Fatalf("FencedSet under %s with maxmemory = %v, want ErrServerUnsafe naming the policy", policy, err)
				}
				if n := c.Exists(ctxT(t), "{o}:fence", "{o}:data").Val(); n != 0 {
					t.Fatalf("FencedSet refused but wrote %d keys", n)
				}
				// Demonstrate why: memory pressure evicts the fence.
				if err := c.Set(ctxT(t), "{o}:fence", "10", 0).Err(); err != nil {
					t.Fatal(err)
				}
				evictSessions(t, c)
				if c.Exists(ctxT(t), "{o}:fence").Val() != 0 {
					t.Logf("the fence key survived this fill under %s", policy)
				}
				return
			}
			if err != nil {
				t.Fatalf("FencedSet(10) under %s = %v", policy, err)
			}
			pressure(t, c, policy)
			if err := set(9); !errors.Is(err, redissimba.ErrFenced) {
				t.Fatalf("FencedSet(9) after 10 and evictions under %s = %v, want ErrFenced (the fence key has no TTL)", policy, err)
			}
		})
	}
}

// pressure fills the server past a memory limit just above its use with
// keys that have a TTL: a volatile-* policy evicts some of them, and
// noeviction refuses writes (OOM).
func pressure(t *testing.T, c redis.UniversalClient, policy string) {
	t.Helper()
	used, err := strconv.ParseInt(infoField(c, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctxT(t), "maxmemory", strconv.FormatInt(used+256<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 4<<10)
	oom := false
	for i := 0; i < 256 && !oom; i++ {
		if err := c.Set(ctxT(t), "filler:"+strconv.Itoa(i), value, time.Minute).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM ") {
				t.Fatal(err)
			}
			oom = true
		}
	}
	if evicted := infoField(c, "stats", "evicted_keys") != "0"; policy == "noeviction" && !oom || policy != "noeviction" && !evicted {
		t.Fatalf("no memory pressure under %s (OOM %v, evicted_keys %s)", policy, oom, infoField(c, "stats", "evicted_keys"))
	}
}

// TestFencedSetAcrossClusterTakeoverAndBack: CLUSTER FAILOVER TAKEOVER to
// the replica and back, through a cluster client: the fence the replica
// acknowledged (WAIT) holds on both, and a lower token stays refused.
func TestFencedSetAcrossClusterTakeoverAndBack(t *testing.T) {
	a, r := startClusterPair(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{a.addr(), r.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	set := func(tok uint64) error {
		return redissimba.FencedSet(ctxT(t), c, "{o}:fence", "{o}:data", tok, strconv.FormatUint(tok, 10), 0)
	}
	if err := set(10); err != nil {
		t.Fatal(err)
	}
	if n, err := a.client(a.addr()).(*redis.Client).Wait(ctxT(t), 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	takeover(t, r, a)
	if err := set(9); !errors.Is(err, redissimba.ErrFenced) {
		t.Fatalf("FencedSet(9) after the takeover = %v, want ErrFenced", err)
	}
	takeover(t, a, r)
	if err := set(9); !errors.Is(err, redissimba.ErrFenced) {
		t.Fatalf("FencedSet(9) after the takeover and back = %v, want ErrFenced", err)
	}
	if err := set(11); err != nil {
		t.Fatalf("FencedSet(11) after the takeover and back = %v", err)
	}
}
