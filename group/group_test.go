package group_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// advance lets d of virtual time pass and waits until every goroutine of
// the bubble is idle.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// record keeps every member's callbacks, checking pairing as they come.
type record struct {
	mu     sync.Mutex
	owner  map[int]string      // partition → member that was last assigned it
	open   map[string]struct{} // "member/partition" with OnAssigned but no OnRevoked yet
	tokens map[int]uint64
	errs   []string
	lines  []string
}

func newRecord() *record {
	return &record{owner: map[int]string{}, open: map[string]struct{}{}, tokens: map[int]uint64{}}
}

func (r *record) listener(member string) group.Listener {
	return group.Funcs{
		Assigned: func(p int, t *term.Term) {
			r.mu.Lock()
			defer r.mu.Unlock()
			k := fmt.Sprintf("%s/%d", member, p)
			if _, ok := r.open[k]; ok {
				r.errs = append(r.errs, "OnAssigned twice without OnRevoked: "+k)
			}
			if t.Token() <= r.tokens[p] {
				r.errs = append(r.errs, fmt.Sprintf("partition %d: token went from %d to %d", p, r.tokens[p], t.Token()))
			}
			r.tokens[p] = t.Token()
			r.open[k] = struct{}{}
			r.lines = append(r.lines, fmt.Sprintf("%s assigned %d", member, p))
		},
		Revoked: func(p int, t *term.Term, reason term.RevokeReason) {
			r.mu.Lock()
			defer r.mu.Unlock()
			k := fmt.Sprintf("%s/%d", member, p)
			if _, ok := r.open[k]; !ok {
				r.errs = append(r.errs, "OnRevoked without OnAssigned: "+k)
			}
			delete(r.open, k)
			r.lines = append(r.lines, fmt.Sprintf("%s revoked %d %s", member, p, reason))
		},
	}
}

func (r *record) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatal(r.errs)
	}
}

func (r *record) openCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

func newBackend(t *testing.T) *memory.Backend {
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openSession(t *testing.T, b session.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func join(t *testing.T, s *session.Session, id string, n int, r *record, opts ...group.Option) *group.Group {
	t.Helper()
	g, err := group.Join(s, "orders", n, append([]group.Option{group.WithMemberID(id), group.WithListener(r.listener(id))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// owned checks that every partition has exactly one valid owner among gs
// and that each owns ⌊n/m⌋ or ⌈n/m⌉; it returns each member's count.
func owned(t *testing.T, n int, gs ...*group.Group) []int {
	t.Helper()
	who := make([]int, n)
	out := make([]int, len(gs))
	for i, g := range gs {
		for p, tm := range g.Terms() {
			if !tm.Valid() {
				continue
			}
			who[p]++
			out[i]++
		}
	}
	for p, k := range who {
		if k != 1 {
			t.Fatalf("partition %d has %d valid owners (counts %v)", p, k, out)
		}
	}
	lo, hi := n/len(gs), (n+len(gs)-1)/len(gs)
	for i, k := range out {
		if k < lo || k > hi {
			t.Fatalf("member %s owns %d partitions, want %d or %d (counts %v)", gs[i].MemberID(), k, lo, hi, out)
		}
	}
	return out
}

// settle is two candidate ticks and a little: the time the group promises
// to become fair and stable in once membership stops changing.
// With the default timing a candidate tick is at most 2.5s + 2.5s.
const settle = 2*5*time.Second + time.Second

func TestJoinLeaveCrashRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		const n = 12
		a := join(t, openSession(t, b), "a", n, r)
		bb := join(t, openSession(t, b), "b", n, r)
		dClient := b.NewClient()
		c := join(t, openSession(t, b), "c", n, r)
		advance(settle)
		owned(t, n, a, bb, c)

		// A fourth member: it takes its share, about a quarter moves.
		before := terms(a, bb, c)
		d := join(t, openSession(t, dClient), "d", n, r)
		advance(settle)
		owned(t, n, a, bb, c, d)
		if k := movedFrom(before, terms(a, bb, c)); k > (n+2)/3 {
			t.Fatalf("a join moved %d partitions, more than ⌈N/m⌉ = %d", k, (n+2)/3)
		}

		// A member leaves: its partitions are handed over in order.
		if err := bb.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		if snap := bb.Snapshot(); snap.Status != "LEFT" || len(snap.Owned) != 0 {
			t.Fatalf("after Leave: %+v", snap)
		}
		advance(settle)
		owned(t, n, a, c, d)

		// A member crashes (nothing it sends reaches the backend any more,
		// so its leases stay until its session expires there): its
		// partitions are taken once its session has expired.
		dClient.FailCalls(errors.New("crashed"))
		_ = d.Session().Close()
		advance(deadline.DefaultLeaseDuration + settle)
		owned(t, n, a, c)
		r.check(t)
	})
}

func terms(gs ...*group.Group) map[int]uint64 {
	out := map[int]uint64{}
	for _, g := range gs {
		for p, t := range g.Terms() {
			out[p] = t.Token()
		}
	}
	return out
}

func movedFrom(before, after map[int]uint64) int {
	k := 0
	for p, tok := range before {
		if after[p] != tok {
			k++
		}
	}
	return k
}

// The handover order: a partition that moves keeps its lease until its
// task has returned; the next owner's OnAssigned comes after.
func TestRebalanceWaitsForTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		var mu sync.Mutex
		var events []string
		task := func(member string) group.Option {
			return group.RunWhileOwner(func(ctx context.Context, p int, tm *term.Term) error {
				<-ctx.Done()
				time.Sleep(3 * time.Second) // ignores cancellation for a while
				mu.Lock()
				events = append(events, fmt.Sprintf("%s task %d returned", member, p))
				mu.Unlock()
				return nil
			})
		}
		a := join(t, openSession(t, b), "a", 2, r, task("a"))
		advance(settle)
		if len(a.Terms()) != 2 {
			t.Fatalf("a alone owns %d of 2", len(a.Terms()))
		}
		bb := join(t, openSession(t, b), "b", 2, r, group.WithListener(group.Funcs{Assigned: func(p int, _ *term.Term) {
			mu.Lock()
			events = append(events, fmt.Sprintf("b assigned %d", p))
			mu.Unlock()
		}}))
		advance(settle)
		owned(t, 2, a, bb)
		mu.Lock()
		defer mu.Unlock()
		if len(events) != 2 || events[1][:10] != "b assigned" {
			t.Fatalf("want a's task to return before b's OnAssigned: %v", events)
		}
	})
}

func TestLeaveFromCallbackDoesNotDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		errc := make(chan error, 1)
		var self atomic.Pointer[group.Group]
		var once sync.Once
		ready := make(chan struct{})
		g, err := group.Join(openSession(t, b), "orders", 3, group.WithListener(group.Funcs{Assigned: func(int, *term.Term) {
			<-ready
			once.Do(func() { errc <- self.Load().Close() })
		}}))
		if err != nil {
			t.Fatal(err)
		}
		self.Store(g)
		close(ready)
		advance(settle)
		if err := <-errc; !errors.Is(err, group.ErrWouldBlockSelf) {
			t.Fatalf("Close from OnAssigned = %v, want ErrWouldBlockSelf", err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if len(g.Terms()) != 0 {
			t.Fatal("terms left after Close")
		}
	})
}

// Callbacks stay paired when the session closes under the group, and
// nothing arrives after Close returns.
func TestSessionCloseRevokesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		s := openSession(t, b)
		join(t, s, "a", 8, r)
		advance(settle)
		if r.openCount() != 8 {
			t.Fatalf("%d partitions assigned, want 8", r.openCount())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if k := r.openCount(); k != 0 {
			t.Fatalf("%d partitions without OnRevoked after Close", k)
		}
		r.check(t)
	})
}

func TestJoinValidates(t *testing.T) {
	b := newBackend(t)
	s := openSession(t, b)
	for _, tc := range []struct {
		name string
		n    int
		opts []group.Option
		rule string
	}{
		{"", 3, nil, "name"},
		{"a:b", 3, nil, "':'"},
		{"ok", 0, nil, "partitions"},
		{"ok", group.MaxPartitions + 1, nil, "partitions"},
		{"ok", 3, []group.Option{group.WithMemberID("bad id")}, "member ID"},
		{string(make([]byte, 100)), 3, nil, "name"},
	} {
		_, err := group.Join(s, tc.name, tc.n, tc.opts...)
		if !errors.Is(err, group.ErrInvalidGroup) {
			t.Errorf("Join(%q, %d) = %v, want ErrInvalidGroup naming %s", tc.name, tc.n, err, tc.rule)
		}
	}
	if _, err := group.Join(s, "twice", 3, group.WithMemberID("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := group.Join(s, "twice", 3, group.WithMemberID("x")); !errors.Is(err, session.ErrAlreadyStarted) {
		t.Fatalf("second Join = %v, want ErrAlreadyStarted", err)
	}
	if _, err := group.Join(s, "twice", 3); !errors.Is(err, session.ErrAlreadyStarted) {
		t.Fatalf("second Join under another member ID = %v, want ErrAlreadyStarted", err)
	}
}

// noInspect hides the memory backend's Inspector.
type noInspect struct{ session.Backend }

func TestJoinNeedsAnInspector(t *testing.T) {
	s := openSession(t, noInspect{newBackend(t)})
	if _, err := group.Join(s, "orders", 3); !errors.Is(err, group.ErrNoInspector) {
		t.Fatalf("Join on a backend without Inspector = %v, want ErrNoInspector", err)
	}
}
