package redissimba_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Eviction (ADR 0164): no maxmemory-policy may make a live owner's lease
// look free. Session keys carry a TTL (every volatile-* policy may evict
// them), lease keys do not (every allkeys-* policy may evict them too);
// only noeviction, or no memory limit, keeps both.

var evictionPolicies = []string{
	"noeviction",
	"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random",
}

// TestEvictionPolicyCheckedAtStart: on a private server with a memory
// limit, the first Open refuses every policy but noeviction with an error
// wrapping ErrServerUnsafe that names the policy and the setting to use;
// Init refuses the same way. Without a limit nothing is evicted: Open
// works, with a warning for a policy that would evict once a limit is set.
func TestEvictionPolicyCheckedAtStart(t *testing.T) {
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			s := startServer(t, "--maxmemory-policy", policy, "--maxmemory", "64mb")
			c := s.client(s.addr())
			b := newUninitialised(t, c, namespace(t))
			_, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second})
			initErr := b.ForceInit(ctxT(t))
			if policy == "noeviction" {
				if err != nil || initErr != nil {
					t.Fatalf("Open, ForceInit under noeviction = %v, %v", err, initErr)
				}
				return
			}
			for what, err := range map[string]error{"Open": err, "ForceInit": initErr} {
				if !errors.Is(err, redissimba.ErrServerUnsafe) || !strings.Contains(err.Error(), "maxmemory-policy "+policy) || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
					t.Fatalf("%s under %s with maxmemory 64mb = %v, want ErrServerUnsafe naming the policy and noeviction", what, policy, err)
				}
			}
			// No memory limit: nothing is evicted, a warning says what a
			// limit would do.
			if err := c.ConfigSet(ctxT(t), "maxmemory", "0").Err(); err != nil {
				t.Fatal(err)
			}
			var log logged
			nb, err := redissimba.New(c, namespace(t), redissimba.WithLogger(slogOf(&log)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nb.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); err != nil {
				t.Fatalf("Open under %s without a memory limit = %v", policy, err)
			}
			if !log.has("WARN redissimba: maxmemory-policy " + policy + " with maxmemory 0") {
				t.Fatalf("logged %q, want the warning about %s without a limit", log.msgs, policy)
			}
		})
	}
}

// evictSessions fills c's memory with keys without a TTL under a limit
// just above what it uses, so that Redis evicts what the policy lets it
// (under volatile-*, every key with a TTL: the sessions), then deletes the
// filler, leaving the limit and the policy: the server is back under its
// limit and accepts writes.
func evictSessions(t *testing.T, c redis.UniversalClient, sessions ...driver.ID) {
	t.Helper()
	used, err := strconv.ParseInt(infoField(c, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctxT(t), "maxmemory", strconv.FormatInt(used+256<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 4<<10)
	var filler []string
	for i := 0; i < 256; i++ {
		k := "filler:" + strconv.Itoa(i)
		if err := c.Set(ctxT(t), k, value, 0).Err(); err != nil {
			if strings.HasPrefix(err.Error(), "OOM ") {
				break // nothing evictable is left
			}
			t.Fatal(err)
		}
		filler = append(filler, k)
	}
	if err := c.Del(ctxT(t), filler...).Err(); err != nil {
		t.Fatal(err)
	}
	if n := infoField(c, "stats", "evicted_keys"); n == "0" {
		t.Fatal("nothing was evicted")
	}
}

// TestEvictedSessionNeverGrantsItsLease reproduces issue 21.2: the
// policy is set to volatile-lru at run time (CONFIG SET, after the first
// Open's check), H holds x, memory pressure evicts H's session key. The
// next grant on that server refuses with ErrServerUnsafe, where it handed
// x to another session as if H's term had expired (within a second of the
// change, the function's bound); H's renewal says its session is gone. Every other evicting policy is refused the same way,
// or, when allkeys-* evicted the epoch, quarantined.
func TestEvictedSessionNeverGrantsItsLease(t *testing.T) {
	for _, policy := range evictionPolicies[1:] {
		t.Run(policy, func(t *testing.T) {
			s := startServer(t, "--maxmemory-policy", "noeviction")
			c := s.client(s.addr())
			ns := namespace(t)
			b := newBackend(t, c, ns)
			h := open(t, b, 20*time.Second)
			tx := acquire(t, b, h, "x")[0]
			if tx == 0 {
				t.Fatal("x not granted")
			}
			if err := c.ConfigSet(ctxT(t), "maxmemory-policy", policy).Err(); err != nil {
				t.Fatal(err)
			}
			renew(t, b, h, 0)
			evictSessions(t, c, h)
			// The acquire function reads the policy at most once a second
			// of Redis time (ADR 0164): the bound the README states.
			waitTimer(1100 * time.Millisecond)
			if policy[:8] == "volatile" {
				if n, err := c.Exists(ctxT(t), "simba:{"+ns+"}:s:"+string(h)).Result(); err != nil || n != 0 {
					t.Fatalf("H's session key not evicted under %s: %d, %v", policy, n, err)
				}
			}
			if policy[:8] == "volatile" {
				if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: h}); !errors.Is(err, driver.ErrExpired) {
					t.Fatalf("H's renewal after its session was evicted = %v, want ErrExpired", err)
				}
			}
			o := open(t, b, 20*time.Second)
			r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x", "fresh"}})
			if err == nil && policy[:7] == "allkeys" && r.Quarantine > 0 && r.Results[0].Token == 0 && r.Results[1].Token == 0 {
				// allkeys-* evicted the epoch (or its lineage) too: the
				// quarantine holds every grant; none is made after it.
				return
			}
			if err == nil {
				t.Fatalf("Acquire under %s with a memory limit = %+v, want ErrServerUnsafe (H believes in x, token %d)", policy, r, tx)
			}
			if !errors.Is(err, redissimba.ErrServerUnsafe) || !strings.Contains(err.Error(), "maxmemory-policy "+policy) {
				t.Fatalf("Acquire under %s = %v, want ErrServerUnsafe naming the policy", policy, err)
			}
		})
	}
}

// TestNoevictionKeepsLeasesUnderMemoryPressure: under noeviction the same
// pressure refuses the filler's writes and evicts nothing: H keeps x, and
// another session is refused it.
func TestNoevictionKeepsLeasesUnderMemoryPressure(t *testing.T) {
	s := startServer(t, "--maxmemory-policy", "noeviction")
	c := s.client(s.addr())
	b := newBackend(t, c, namespace(t))
	h := open(t, b, 20*time.Second)
	tx := acquire(t, b, h, "x")[0]
	o := open(t, b, 20*time.Second)
	used, err := strconv.ParseInt(infoField(c, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctxT(t), "maxmemory", strconv.FormatInt(used+64<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := c.Set(ctxT(t), "filler:"+strconv.Itoa(i), strings.Repeat("v", 4<<10), 0).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM ") {
				t.Fatal(err)
			}
			break
		}
	}
	if got := renew(t, b, h, 0); len(got.Leases) != 1 || got.Leases[0].Token != tx {
		t.Fatalf("H under memory pressure: %+v, want x under token %d", got, tx)
	}
	if tok := acquire(t, b, o, "x")[0]; tok != 0 {
		t.Fatalf("another session got x (token %d) from its live holder under memory pressure", tok)
	}
}
