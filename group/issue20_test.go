package group_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The defects of issue 20 in partition groups, each with the test that
// failed before its fix.

// blindable is a backend client whose inspections can be made to fail
// while every other call works: a member that cannot see its group.
type blindable struct {
	*memory.Backend
	blind atomic.Bool
}

var errCannotList = errors.New("listing leases is denied")

func (b *blindable) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	if b.blind.Load() {
		return nil, errCannotList
	}
	return b.Backend.Inspect(ctx, req)
}

// errs collects what OnError is told.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	e.list = append(e.list, err)
	e.mu.Unlock()
}

func (e *errs) count(target error) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := 0
	for _, err := range e.list {
		if errors.Is(err, target) {
			k++
		}
	}
	return k
}

// Item 11: OnError ran with the engine's lock held, so a call into the
// group or the session from it deadlocked the session. It now runs with
// no lock held, and Close from it does not wait for the loop it holds.
// Real time, bounded: a goroutine stuck on a mutex is no synctest
// deadlock, so the old defect would hang a bubble instead of failing it.
func TestOnErrorMayCallTheGroupAndTheSession(t *testing.T) {
	b := &blindable{Backend: newBackend(t)}
	b.blind.Store(true) // the first poll, at once after the member record is won, fails
	// No Close in a cleanup: after a deadlock it would hang the test
	// binary instead of letting the test fail.
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	var self atomic.Pointer[group.Group]
	ready := make(chan struct{})
	calls := make(chan error, 1)
	var once sync.Once
	g, err := group.Join(s, "orders", 4, group.WithMemberID("a"), group.OnError(func(error) {
		<-ready
		once.Do(func() {
			g := self.Load()
			_ = g.Snapshot()
			_ = g.Terms()
			_ = s.State()
			_ = s.Snapshot()
			calls <- g.Close()
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	self.Store(g)
	close(ready)
	select {
	case err := <-calls:
		if !errors.Is(err, group.ErrWouldBlockSelf) {
			t.Fatalf("Close from OnError = %v, want ErrWouldBlockSelf", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OnError's calls into the group and the session did not return within 20s (deadlocked on the engine's lock?)")
	}
	for deadline := time.Now().Add(10 * time.Second); g.Snapshot().Status != "LEFT"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after Close from OnError the member is %s, want LEFT", g.Snapshot().Status)
		}
	}
	if st := s.State(); st != session.Live {
		t.Fatalf("session %v after the callback, want LIVE", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Item 9: RunWhileOwner(nil) was accepted and crashed the process at the
// first term won.
func TestJoinRefusesANilTask(t *testing.T) {
	s := openSession(t, newBackend(t))
	_, err := group.Join(s, "orders", 3, group.RunWhileOwner(nil))
	if !errors.Is(err, group.ErrInvalidGroup) || !strings.Contains(err.Error(), "RunWhileOwner(nil)") {
		t.Fatalf("Join with RunWhileOwner(nil) = %v, want ErrInvalidGroup naming RunWhileOwner(nil)", err)
	}
}

// Item 7: members configured with different partition counts (a rolling
// deploy from 12 to 16) split the group silently: two partitions stayed
// unowned. Now every member reports the mismatch, the group serves the
// smallest count meanwhile (every partition of it owned, nobody handed a
// partition it does not know), and the new count once all agree.
func TestMembersThatDisagreeOnTheCountServeTheSmallest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		var ea, eb errs
		heard := map[string]string{}
		var mu sync.Mutex
		mismatch := func(member string) group.Option {
			return group.WithListener(mismatchListener{Listener: r.listener(member), f: func(agreed int, counts string) {
				mu.Lock()
				heard[member] = fmt.Sprintf("%d %s", agreed, counts)
				mu.Unlock()
			}})
		}
		a, err := group.Join(openSession(t, b), "orders", 12, group.WithMemberID("a"), mismatch("a"), group.OnError(ea.add))
		if err != nil {
			t.Fatal(err)
		}
		bb, err := group.Join(openSession(t, b), "orders", 16, group.WithMemberID("b"), mismatch("b"), group.OnError(eb.add))
		if err != nil {
			t.Fatal(err)
		}
		advance(settle)
		owned(t, 12, a, bb)
		for _, g := range []*group.Group{a, bb} {
			if snap := g.Snapshot(); snap.Agreed != 12 || snap.Mismatch != "a=12 b=16" {
				t.Fatalf("%s: agreed %d, mismatch %q; want 12 and \"a=12 b=16\"", g.MemberID(), snap.Agreed, snap.Mismatch)
			}
		}
		if ea.count(group.ErrPartitionsMismatch) != 1 || eb.count(group.ErrPartitionsMismatch) != 1 {
			t.Fatalf("ErrPartitionsMismatch reported %d and %d times, want once to each member", ea.count(group.ErrPartitionsMismatch), eb.count(group.ErrPartitionsMismatch))
		}
		mu.Lock()
		if heard["a"] != "12 a=12 b=16" || heard["b"] != "12 a=12 b=16" {
			t.Fatalf("OnPartitionsMismatch heard %v, want \"12 a=12 b=16\" by both", heard)
		}
		mu.Unlock()

		// The last member at 12 goes: the group now serves 16.
		if err := a.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		c, err := group.Join(openSession(t, b), "orders", 16, group.WithMemberID("c"), group.WithListener(r.listener("c")))
		if err != nil {
			t.Fatal(err)
		}
		advance(settle)
		owned(t, 16, bb, c)
		if snap := bb.Snapshot(); snap.Agreed != 16 || snap.Mismatch != "" {
			t.Fatalf("after the deploy: agreed %d, mismatch %q; want 16 and none", snap.Agreed, snap.Mismatch)
		}
		r.check(t)
	})
}

type mismatchListener struct {
	group.Listener
	f func(agreed int, counts string)
}

func (m mismatchListener) OnPartitionsMismatch(agreed int, counts string) { m.f(agreed, counts) }

// Item 5: a member whose inspections fail while its renewals work kept
// its member record: the others reserved its share and it never took it
// (4 of 12 unowned for good). Now it withdraws after a lease duration
// without seeing the group, the others take everything, and it joins
// again once it sees the group.
func TestAMemberThatCannotSeeTheGroupWithdraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		const n = 12
		a := join(t, openSession(t, b), "a", n, r)
		bb := join(t, openSession(t, b), "b", n, r)
		blind := &blindable{Backend: b.NewClient()}
		blind.blind.Store(true)
		var ec errs
		c := join(t, openSession(t, blind), "c", n, r, group.OnError(ec.add))
		// The bound: a lease duration without a successful poll, the
		// poll that notices it, then the others' poll and acquisition.
		advance(deadline.DefaultLeaseDuration + settle + 5*time.Second)
		owned(t, n, a, bb)
		if got := c.Snapshot().Status; got != "WITHDRAWN" {
			t.Fatalf("the blind member is %s, want WITHDRAWN", got)
		}
		if ec.count(group.ErrBlind) != 1 {
			t.Fatalf("ErrBlind reported %d times, want once", ec.count(group.ErrBlind))
		}

		blind.blind.Store(false)
		advance(2 * settle)
		owned(t, n, a, bb, c)
		r.check(t)
	})
}

// Item 6: an election or a lock under a group's lease name was read as a
// member (orders:m:ghost: 4 of 12 unowned) or held a partition for good
// (orders:p:3). Such names are refused now.
func TestGroupLeaseNamesAreNotElections(t *testing.T) {
	s := openSession(t, newBackend(t))
	for _, name := range []string{"orders:m:ghost", "orders:m:ghost.12", "orders:p:3"} {
		if _, err := election.Start(s, name); !errors.Is(err, deadline.ErrInvalidName) {
			t.Errorf("election.Start(%q) = %v, want ErrInvalidName (a group's lease form)", name, err)
		}
	}
	for _, name := range []string{"orders:p:x", "orders:p:03", "a:b:p:3", "orders:members"} {
		e, err := election.Start(s, name)
		if err != nil {
			t.Errorf("election.Start(%q) = %v: not a group's form, must be accepted", name, err)
			continue
		}
		_ = e.Close()
	}
}

// Item 10: each task started after its own OnAssigned, which waited
// behind the group's serial queue: one slow OnAssigned kept every other
// partition's task from running.
func TestASlowCallbackDoesNotHoldBackOtherTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		release := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		var running atomic.Int32
		slow := group.WithListener(group.Funcs{Assigned: func(int, *term.Term) {
			<-release // one OnAssigned takes as long as the test wants
		}})
		task := group.RunWhileOwner(func(ctx context.Context, _ int, _ *term.Term) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return nil
		})
		g, err := group.Join(openSession(t, b), "orders", 4, group.WithMemberID("a"), slow, task)
		if err != nil {
			t.Fatal(err)
		}
		advance(settle)
		if k := running.Load(); k != 4 {
			t.Fatalf("%d of 4 tasks running while one OnAssigned is slow, want 4", k)
		}
		once.Do(func() { close(release) })
		if err := g.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// An executor that refuses OnAssigned: the listener never hears of the
// term, so the partition is handed over (after its task returned) and not
// taken again for a lease duration, while the member's other partitions
// stay. Killed by the mutation group-refused-onassigned-keeps-term.
func TestRefusedOnAssignedGivesThePartitionBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		var refusals atomic.Int32
		x := election.ExecutorFunc(func(f func()) error {
			if refusals.Add(1) == 1 {
				return errors.New("executor full")
			}
			go f()
			return nil
		})
		var running atomic.Int32
		task := group.RunWhileOwner(func(ctx context.Context, _ int, _ *term.Term) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return nil
		})
		var ea errs
		a := join(t, openSession(t, b), "a", 4, r, group.WithExecutor(x), task, group.OnError(ea.add))
		advance(settle)
		if k := len(a.Terms()); k != 3 {
			t.Fatalf("a holds %d terms after one OnAssigned was refused, want 3 (the refused one given back)", k)
		}
		if k := running.Load(); k != 3 {
			t.Fatalf("%d tasks running, want 3: the refused term's task must have been stopped", k)
		}
		if ea.count(election.ErrRefused) != 1 {
			t.Fatalf("the refusal was reported %d times, want once", ea.count(election.ErrRefused))
		}
		advance(deadline.DefaultLeaseDuration + settle)
		if k := len(a.Terms()); k != 4 {
			t.Fatalf("a holds %d terms a lease after the refusal, want 4", k)
		}
		if err := a.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.check(t)
		if k := r.openCount(); k != 0 {
			t.Fatalf("%d partitions without OnRevoked after Leave", k)
		}
	})
}

// assignedCount counts OnAssigned per partition.
type assignedCount struct {
	mu sync.Mutex
	n  map[int]int
}

func (a *assignedCount) listener() group.Listener {
	return group.Funcs{Assigned: func(p int, _ *term.Term) {
		a.mu.Lock()
		a.n[p]++
		a.mu.Unlock()
	}}
}

func (a *assignedCount) reset() map[int]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.n
	a.n = map[int]int{}
	return out
}

// Stickiness: members that start a moment apart (or leave a quarantine
// a moment apart) used to move partitions more than the assignment
// needs: the first to poll saw itself alone, took every partition and
// gave most back. Now each partition gets one owner.
func TestMembersStartingTogetherMoveNothingTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memoryWithLease(t)
		const n = 8
		count := &assignedCount{n: map[int]int{}}
		var gs []*group.Group
		for _, id := range []string{"a", "b", "c"} {
			g, err := group.Join(openSession(t, b), "orders", n, group.WithMemberID(id), group.WithListener(count.listener()))
			if err != nil {
				t.Fatal(err)
			}
			gs = append(gs, g)
			advance(400 * time.Millisecond)
		}
		advance(settle)
		owned(t, n, gs...)
		for p, k := range count.reset() {
			if k != 1 {
				t.Fatalf("starting together: partition %d had %d owners, want 1", p, k)
			}
		}

		// The backend loses its data: every term ends, the quarantine
		// passes, the members come back one after another.
		b.LoseData(false)
		advance(2*deadline.DefaultLeaseDuration + 2*settle)
		owned(t, n, gs...)
		for p, k := range count.reset() {
			if k != 1 {
				t.Fatalf("after a data loss: partition %d had %d owners, want 1", p, k)
			}
		}
	})
}

func memoryWithLease(t *testing.T) *memory.Backend {
	b, err := memory.New(memory.WithMaxLease(deadline.DefaultLeaseDuration))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The handover's wait for a task that ignores cancellation is bounded by
// the term's remaining time: the Leave completes, and the partition moves,
// even if the task never returns. Killed by the mutation
// group-handover-wait-unbounded.
func TestHandoverOfATaskThatNeverReturnsIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		forever := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(forever) }) })
		stuck := group.RunWhileOwner(func(context.Context, int, *term.Term) error {
			<-forever // ignores cancellation
			return nil
		})
		a := join(t, openSession(t, b), "a", 2, r, stuck)
		advance(settle)
		if k := len(a.Terms()); k != 2 {
			t.Fatalf("a owns %d of 2", k)
		}
		left := make(chan error, 1)
		go func() { left <- a.Leave(context.Background()) }()
		advance(deadline.DefaultLeaseDuration + time.Second)
		select {
		case err := <-left:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Leave still waiting for tasks that never return, a lease after it began: the handover is not bounded")
		}
		bb := join(t, openSession(t, b), "b", 2, r)
		advance(settle)
		owned(t, 2, bb)
		once.Do(func() { close(forever) })
		r.check(t)
	})
}
