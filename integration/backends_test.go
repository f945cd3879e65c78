package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/simbatest"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { removeWorkerBuild() }))
}

// timing keeps failover short on real servers: lease 2s, renewal every
// 600ms.
var timing = deadline.Config{LeaseDuration: 2 * time.Second, RenewInterval: 600 * time.Millisecond}

// backends starts, for each backend, its server in containers (simbatest:
// testcontainers-go) and returns a constructor of clients of one shared
// namespace, each cleaned up with the test.
var backends = []struct {
	name  string
	start func(t testing.TB) (newClient func() session.Backend)
}{
	{"memory", func(t testing.TB) func() session.Backend {
		root := simbatest.Memory(t)
		return func() session.Backend { return root.NewClient() }
	}},
	{"postgres", func(t testing.TB) func() session.Backend {
		s := simbatest.Postgres(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"mysql", func(t testing.TB) func() session.Backend {
		s := simbatest.MySQL(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"redis", func(t testing.TB) func() session.Backend {
		s := simbatest.Redis(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"redis-cluster", func(t testing.TB) func() session.Backend {
		s := simbatest.Redis(t, simbatest.WithCluster())
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"zookeeper", func(t testing.TB) func() session.Backend {
		s := simbatest.ZooKeeper(t)
		return func() session.Backend { return s.NewBackend(t) }
	}},
	{"zookeeper-ensemble", func(t testing.TB) func() session.Backend {
		s := simbatest.ZooKeeper(t, simbatest.WithCluster())
		return func() session.Backend { return s.NewBackend(t) }
	}},
}

// forEachBackend runs body once per backend, in parallel: one test body for
// every backend, each on its own servers.
func forEachBackend(t *testing.T, body func(t *testing.T, newClient func() session.Backend)) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			body(t, bk.start(t))
		})
	}
}

// cut is a backend whose calls can be made to fail: a node cut off from
// the backend, or a crashed one, as far as the backend can tell.
type cut struct {
	session.Backend
	off atomic.Bool
}

var errCut = errors.New("cut off from the backend")

func (c *cut) check() error {
	if c.off.Load() {
		return errCut
	}
	return nil
}

func (c *cut) Open(ctx context.Context, r driver.OpenRequest) (driver.OpenReply, error) {
	if err := c.check(); err != nil {
		return driver.OpenReply{}, err
	}
	return c.Backend.Open(ctx, r)
}

func (c *cut) Renew(ctx context.Context, r driver.RenewRequest) (driver.RenewReply, error) {
	if err := c.check(); err != nil {
		return driver.RenewReply{}, err
	}
	return c.Backend.Renew(ctx, r)
}

func (c *cut) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.AcquireReply, error) {
	if err := c.check(); err != nil {
		return driver.AcquireReply{}, err
	}
	return c.Backend.Acquire(ctx, r)
}

func (c *cut) Release(ctx context.Context, r driver.ReleaseRequest) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Backend.Release(ctx, r)
}

func (c *cut) Close(ctx context.Context, id session.ID) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Backend.Close(ctx, id)
}

// Subscribe forwards the inner backend's broadcast, if it has one: a
// decorator keeps the capabilities of what it wraps.
func (c *cut) Subscribe(fn func(driver.Notice)) (func(), error) {
	if bc, ok := c.Backend.(driver.Broadcaster); ok {
		return bc.Subscribe(fn)
	}
	return func() {}, nil
}

// node is one process: a session and its election.
type node struct {
	name string
	b    *cut
	s    *session.Session
	e    *election.Election
}

// timeline records callbacks and task ends across nodes, in order.
type timeline struct {
	mu     sync.Mutex
	lines  []string
	leader chan string
}

func (tl *timeline) add(format string, args ...any) {
	tl.mu.Lock()
	tl.lines = append(tl.lines, fmt.Sprintf(format, args...))
	tl.mu.Unlock()
}

// snapshot copies the lines under the lock: nodes' tasks add lines
// concurrently with the test reading them.
func (tl *timeline) snapshot() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]string(nil), tl.lines...)
}

func (tl *timeline) index(line string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i, l := range tl.lines {
		if l == line {
			return i
		}
	}
	return -1
}

func startNode(t *testing.T, name string, b session.Backend, tl *timeline, terms *sync.Map) *node {
	t.Helper()
	n := &node{name: name, b: &cut{Backend: b}}
	s, err := session.Open(t.Context(), n.b, session.WithConfig(timing), session.WithLogger(nil))
	if err != nil {
		t.Fatalf("%s: Open: %v", name, err)
	}
	n.s = s
	e, err := election.Start(s, "it-leader",
		election.WithListener(election.Funcs{
			Elected: func(tm *term.Term) {
				// Mutual exclusion in real time: no other node believes it leads.
				terms.Range(func(k, v any) bool {
					if other := v.(*term.Term); k != name && other.Valid() {
						tl.add("VIOLATION %s elected %s while %s holds %s", name, tm, k, other)
					}
					return true
				})
				terms.Store(name, tm)
				tl.add("%s elected %d", name, tm.Token())
				tl.leader <- name
			},
			Revoked: func(tm *term.Term, r term.RevokeReason) { tl.add("%s revoked %d %s", name, tm.Token(), r.String()) },
		}),
		election.RunWhileLeader(func(ctx context.Context, tm *term.Term) error {
			tl.add("%s task started %d", name, tm.Token())
			<-ctx.Done()
			<-time.After(50 * time.Millisecond) // winding down
			tl.add("%s task returned %d", name, tm.Token())
			return nil
		}))
	if err != nil {
		t.Fatalf("%s: election: %v", name, err)
	}
	n.e = e
	return n
}

func waitLeader(t *testing.T, tl *timeline, within time.Duration) string {
	t.Helper()
	select {
	case n := <-tl.leader:
		return n
	case <-time.After(within):
		t.Fatalf("no leader within %v; timeline %q", within, tl.snapshot())
		return ""
	}
}

// TestElectionHandoverFailoverAndLocks runs the same story on every backend:
// election, voluntary handover in order, failover after a node is cut off
// (its term ends at its local deadline, before anyone else is elected), and
// a lock whose tokens rise.
func TestElectionHandoverFailoverAndLocks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newClient func() session.Backend) {
		tl := &timeline{leader: make(chan string, 8)}
		var terms sync.Map
		nodes := map[string]*node{}
		for _, name := range []string{"a", "b"} {
			nodes[name] = startNode(t, name, newClient(), tl, &terms)
		}
		defer func() {
			for _, n := range nodes {
				n.b.off.Store(false)
				_ = n.e.Close()
				_ = n.s.Close()
			}
		}()

		first := waitLeader(t, tl, 10*time.Second)
		firstTerm, _ := terms.Load(first)
		t1 := firstTerm.(*term.Term).Token()

		// Voluntary handover: Stop returns after the task returned, the lease
		// was released and OnRevoked ran; the other node follows.
		if err := nodes[first].e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		second := waitLeader(t, tl, 10*time.Second)
		if second == first {
			t.Fatalf("%s elected again after stopping", first)
		}
		secondTerm, _ := terms.Load(second)
		t2 := secondTerm.(*term.Term).Token()
		if t2 <= t1 {
			t.Fatalf("token went from %d to %d", t1, t2)
		}
		// A Stop that comes between OnElected and the task's start revokes
		// the term first, and the task never starts: nothing to wait for.
		started := tl.index(fmt.Sprintf("%s task started %d", first, t1)) >= 0
		if r, e := tl.index(fmt.Sprintf("%s task returned %d", first, t1)), tl.index(fmt.Sprintf("%s elected %d", second, t2)); started && (r < 0 || r > e) {
			t.Fatalf("the new leader was elected before the old task returned: %q", tl.snapshot())
		}

		// Start the stopped node again, then cut the leader off.
		nodes[first+"2"] = startNode(t, first+"2", newClient(), tl, &terms)
		nodes[second].b.off.Store(true)
		third := waitLeader(t, tl, 15*time.Second)
		if third == second {
			t.Fatalf("%s, cut off, was elected", second)
		}
		if st := secondTerm.(*term.Term); st.Valid() || st.Reason() != term.DeadlinePassed {
			t.Fatalf("cut-off leader's term: valid %v reason %v, want ended with DEADLINE_PASSED", st.Valid(), st.Reason())
		}
		for _, l := range tl.snapshot() {
			if strings.HasPrefix(l, "VIOLATION") {
				t.Fatal(l)
			}
		}

		// Locks: one holder at a time, rising tokens.
		s1, s2 := nodes[third].s, nodes[first].s
		if third == first {
			s2 = nodes[first+"2"].s
		}
		h1, err := lock.Acquire(t.Context(), s1, "it-lock")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.TryAcquire(t.Context(), s2, "it-lock"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock = %v, want ErrNotAcquired", err)
		}
		_ = h1.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		h2, err := lock.Acquire(ctx, s2, "it-lock")
		if err != nil {
			t.Fatal(err)
		}
		if h2.Token() <= h1.Token() {
			t.Fatalf("lock token went from %d to %d", h1.Token(), h2.Token())
		}
		_ = h2.Close()
	})
}
