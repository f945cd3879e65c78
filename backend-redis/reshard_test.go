package redissimba_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Redis Cluster under resharding (issue 10, ADR 0131): the namespace's slot
// is moved between masters of the shared Cluster while sessions contend.
// Only the test's own namespace lives in that slot (a random namespace
// hashes to one of 16,384 slots), and the move is finished at cleanup
// whatever happens, so the Cluster is left stable for other tests.

// migration moves one slot from one master of the Cluster to another.
type migration struct {
	t        testing.TB
	slot     int64
	from, to *redis.Client
	fromID   string
	toID     string
	all      []*redis.Client // every master, to announce the new owner
	done     bool
}

// startMigration marks the slot of key IMPORTING on another master and
// MIGRATING on its owner: from here on the owner answers ASK for keys it
// no longer has.
func startMigration(t *testing.T, key string) *migration {
	t.Helper()
	addrs := os.Getenv(envCluster)
	if addrs == "" {
		t.Fatalf("%s is not set: run ./scripts/services.sh start and source .services/env", envCluster)
	}
	m := &migration{t: t}
	ctx := ctxT(t)
	var masters []*redis.Client
	for _, a := range strings.Split(addrs, ",") {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		masters = append(masters, c)
	}
	slot, err := masters[0].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	m.slot, m.all = slot, masters
	for _, c := range masters {
		// The owner answers GETKEYSINSLOT for the slot (others have none);
		// the owner is the master CLUSTER NODES reports with the slot.
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		if owns(ctx, t, c, id, slot) {
			m.from, m.fromID = c, id
		} else if m.to == nil {
			m.to, m.toID = c, id
		}
	}
	if m.from == nil || m.to == nil {
		t.Fatalf("slot %d: no owner and target among %s", slot, addrs)
	}
	t.Cleanup(m.finish)
	if err := m.to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// owns reports whether node id serves slot, from CLUSTER SHARDS.
func owns(ctx context.Context, t testing.TB, c *redis.Client, id string, slot int64) bool {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		for _, r := range s.Slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				for _, n := range s.Nodes {
					if n.ID == id && n.Role == "master" {
						return true
					}
				}
			}
		}
	}
	return false
}

// move migrates keys to the target (MIGRATE … KEYS, atomic per call).
func (m *migration) move(keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	opts := m.to.Options()
	host, port, _ := strings.Cut(opts.Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	return m.from.Do(context.Background(), args...).Err()
}

// keysLeft lists the slot's keys still on the owner.
func (m *migration) keysLeft() ([]string, error) {
	return m.from.ClusterGetKeysInSlot(context.Background(), int(m.slot), 1000).Result()
}

// finish moves every key left and gives the slot to the target on every
// master; it runs at cleanup too, so the Cluster never stays mid-move.
func (m *migration) finish() {
	if m.done {
		return
	}
	m.done = true
	for {
		ks, err := m.keysLeft()
		if err != nil {
			m.t.Errorf("finishing the migration of slot %d: %v", m.slot, err)
			return
		}
		if len(ks) == 0 {
			break
		}
		if err := m.move(ks...); err != nil {
			m.t.Errorf("finishing the migration of slot %d: %v", m.slot, err)
			return
		}
	}
	ctx := context.Background()
	for _, c := range append([]*redis.Client{m.to, m.from}, m.all...) {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err(); err != nil {
			m.t.Errorf("giving slot %d to %s: %v", m.slot, m.toID, err)
		}
	}
}

// TestClusterMigrationKeepsOwnerAlive places the keys as a live slot
// migration can: the lease of x and a contender's session already on the
// importing node, x's owner's session still on the migrating one. The
// contender's Acquire is sent to the importing node (ASK). There the
// owner's session key is missing, so a script that reads it without
// declaring it (the old acquire script's EXISTS ARGV[2]..owner) took x
// from a live owner: two holders. With every key declared the script never
// decides on a key the node does not have: Redis answers TRYAGAIN, or the
// script asks for the owner's key first, and nothing is granted.
//
// It checks the declared keys alone: WithoutRestartQuarantine keeps the
// quarantine a slot move starts (TestClusterSlotMoveQuarantines) from
// refusing the contender for another reason.
func TestClusterMigrationKeepsOwnerAlive(t *testing.T) {
	c := cluster(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithoutRestartQuarantine())
	owner := open(t, b, 10*time.Second)
	tok := acquire(t, b, owner, "x")[0]
	contender := open(t, b, 10*time.Second)
	pre := "simba:{" + ns + "}:"
	m := startMigration(t, pre+"l:x")
	// Everything but the owner's session moves first.
	var rest []string
	ks, err := m.keysLeft()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k != pre+"s:"+string(owner) {
			rest = append(rest, k)
		}
	}
	if err := m.move(rest...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := b.Acquire(ctx, driver.AcquireRequest{ID: contender, Names: []string{"x"}})
	if err == nil && r.Results[0].Token != 0 {
		t.Fatalf("contender took x (token %d) from its live owner (token %d) during the slot migration: two holders", r.Results[0].Token, tok)
	}
	t.Logf("contender's Acquire mid-migration: %+v, %v", r, err)
	m.finish()
	// After the move the owner still holds x, and the contender still
	// cannot take it.
	if got := renew(t, b, owner, 0); len(got.Leases) != 1 || got.Leases[0].Token != tok {
		t.Fatalf("owner after the migration: %+v, want x under token %d", got, tok)
	}
	if got := acquire(t, b, contender, "x")[0]; got != 0 {
		t.Fatalf("contender took x (token %d) after the migration", got)
	}
	// Close with leases declares the lease keys: x is freed.
	if err := b.Close(ctxT(t), owner); err != nil {
		t.Fatal(err)
	}
	if got := acquire(t, b, contender, "x")[0]; got <= tok {
		t.Fatalf("contender after the owner closed: token %d, want > %d", got, tok)
	}
}

// hold is one term a contender believed in: from the grant's reply to the
// release's send, on this process's clock.
type hold struct {
	who        driver.ID
	name       string
	token      uint64
	from, till time.Time
}

// TestClusterContendDuringLiveMigration has sessions contend for a few
// names while the namespace's slot moves live three times, key by key in random
// order with pauses (as redis-cli --cluster reshard does, slower), and checks
// that two terms of one name never overlap.
func TestClusterContendDuringLiveMigration(t *testing.T) {
	c := cluster(t)
	ns := namespace(t)
	names := []string{"a", "b", "c"}
	// The declared keys alone: WithoutRestartQuarantine keeps the
	// quarantine each move starts (TestClusterSlotMoveQuarantines) from
	// refusing every grant after the first move.
	newBackend(t, c, ns) // Init
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		holds   []hold
		errs    int
		seenErr = map[string]int{}
	)
	for w := range 6 {
		be := newUninitialised(t, cluster(t), ns, redissimba.WithoutRestartQuarantine())
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var id driver.ID
			for ctx.Err() == nil {
				if id == "" {
					o, err := be.Open(ctx, driver.OpenRequest{LeaseDuration: 5 * time.Second})
					if err != nil {
						mu.Lock()
						errs++
						mu.Unlock()
						continue
					}
					id = o.ID
				}
				name := names[rng.IntN(len(names))]
				r, err := be.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{name}})
				got := time.Now()
				if err != nil || r.Results[0].Token == 0 {
					if err != nil {
						mu.Lock()
						errs++
						if seenErr[err.Error()[:min(60, len(err.Error()))]]++; seenErr[err.Error()[:min(60, len(err.Error()))]] == 1 {
							t.Logf("acquire %s: %v", id[:6], err)
						}
						mu.Unlock()
					}
					continue
				}
				<-time.After(time.Duration(rng.IntN(20)) * time.Millisecond) // act as the holder
				sent := time.Now()
				err = be.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: r.Results[0].Token}}})
				mu.Lock()
				holds = append(holds, hold{id, name, r.Results[0].Token, got, sent})
				mine := len(holds) - 1
				mu.Unlock()
				if err != nil {
					// Not released (refused mid-migration, so not run): the
					// lease stays held until the session closes. Close it
					// (retrying) and start a new one. The server frees the
					// lease no earlier than the first Close is sent, so
					// that ends the hold; the time Close returned would be
					// too late: a grant that followed the Close on the
					// server could then look like an overlap (seen once in
					// a clean-clone CI run: the grant's reply came within
					// the same millisecond as the Close's).
					closing := time.Now()
					for ctx.Err() == nil && be.Close(ctx, id) != nil {
					}
					mu.Lock()
					holds[mine].till = closing
					mu.Unlock()
					id = ""
				}
			}
			if id != "" {
				_ = be.Close(context.Background(), id)
			}
		}()
	}
	<-time.After(300 * time.Millisecond) // every contender has a session
	moved := 0
	for range 3 { // three moves, each to another master
		m := startMigration(t, "simba:{"+ns+"}:l:a")
		for {
			ks, err := m.keysLeft()
			if err != nil {
				t.Fatal(err)
			}
			if len(ks) == 0 {
				break
			}
			// A random key, but the namespace's own keys (leases, epoch,
			// index) before sessions half the time: the order most likely
			// to split a lease from its owner's session.
			k := ks[rand.IntN(len(ks))]
			for _, o := range ks {
				if !strings.Contains(o, "}:s:") && rand.IntN(2) == 0 {
					k = o
					break
				}
			}
			if err := m.move(k); err != nil {
				t.Fatalf("MIGRATE %s: %v", k, err)
			}
			moved++
			<-time.After(60 * time.Millisecond)
		}
		m.finish()
	}
	<-time.After(300 * time.Millisecond)
	cancel()
	wg.Wait()
	byName := map[string][]hold{}
	for _, h := range holds {
		byName[h.name] = append(byName[h.name], h)
	}
	for name, hs := range byName {
		for i := range hs {
			for j := i + 1; j < len(hs); j++ {
				x, y := hs[i], hs[j]
				if x.token != y.token && x.from.Before(y.till) && y.from.Before(x.till) {
					t.Errorf("%s: tokens %d (%s) and %d (%s) held at once (%v–%v and %v–%v)", name, x.token, x.who[:6], y.token, y.who[:6],
						x.from.Format("15:04:05.000"), x.till.Format("15:04:05.000"), y.from.Format("15:04:05.000"), y.till.Format("15:04:05.000"))
				}
			}
		}
	}
	t.Logf("%d keys moved one by one, %d terms, %d calls refused mid-migration (TRYAGAIN and the like)", moved, len(holds), errs)
	if len(holds) == 0 {
		t.Fatal("no term was won")
	}
}
