package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// Inspect forwards the inner backend's inspection: a decorator keeps the
// capabilities of what it wraps.
func (c *cut) Inspect(ctx context.Context, r driver.InspectRequest) ([]driver.Holder, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	insp, ok := c.Backend.(driver.Inspector)
	if !ok {
		return nil, fmt.Errorf("%T: %w", c.Backend, session.ErrNoInspector)
	}
	return insp.Inspect(ctx, r)
}

// groupLog checks callbacks across members: paired per member and
// partition, and no token handed out twice for a partition.
type groupLog struct {
	mu     sync.Mutex
	open   map[string]uint64 // member/partition → token of the open OnAssigned
	tokens map[int]map[uint64]string
	errs   []string
}

func (l *groupLog) listener(member string) group.Listener {
	return group.Funcs{
		Assigned: func(p int, t *term.Term) {
			l.mu.Lock()
			defer l.mu.Unlock()
			k := fmt.Sprintf("%s/%d", member, p)
			if tok, ok := l.open[k]; ok {
				l.errs = append(l.errs, fmt.Sprintf("%s: OnAssigned #%d while #%d is open", k, t.Token(), tok))
			}
			l.open[k] = t.Token()
			if l.tokens[p] == nil {
				l.tokens[p] = map[uint64]string{}
			}
			if other, ok := l.tokens[p][t.Token()]; ok {
				l.errs = append(l.errs, fmt.Sprintf("partition %d: token %d given to %s and %s", p, t.Token(), other, member))
			}
			l.tokens[p][t.Token()] = member
		},
		Revoked: func(p int, t *term.Term, _ term.RevokeReason) {
			l.mu.Lock()
			defer l.mu.Unlock()
			k := fmt.Sprintf("%s/%d", member, p)
			if tok, ok := l.open[k]; !ok || tok != t.Token() {
				l.errs = append(l.errs, fmt.Sprintf("%s: OnRevoked #%d without its OnAssigned", k, t.Token()))
			}
			delete(l.open, k)
		},
	}
}

type groupMember struct {
	name string
	b    *cut
	s    *session.Session
	g    *group.Group
}

// TestGroupStory is the partition-group story on every backend: three
// members share 12 partitions; one is killed (cut off from the backend: its
// partitions are taken once its session expires there); one joins; one
// leaves, handing its partitions over in order. At every sample no
// partition has two valid owners, and the shares are fair once settled.
func TestGroupStory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newClient func() session.Backend) {
		const n = 12
		l := &groupLog{open: map[string]uint64{}, tokens: map[int]map[uint64]string{}}
		join := func(name string) *groupMember {
			m := &groupMember{name: name, b: &cut{Backend: newClient()}}
			s, err := session.Open(t.Context(), m.b, session.WithConfig(groupTiming), session.WithLogger(nil), session.WithIdentity(name, nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			m.s = s
			m.g, err = group.Join(s, "orders", n, group.WithMemberID(name), group.WithListener(l.listener(name)))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		a, b, c := join("a"), join("b"), join("c")
		settleGroup(t, n, a, b, c)

		a.b.off.Store(true) // killed: nothing it sends reaches the backend
		settleGroup(t, n, b, c)
		_ = a.s.Close()

		d := join("d")
		settleGroup(t, n, b, c, d)

		if err := c.g.Leave(t.Context()); err != nil {
			t.Fatal(err)
		}
		settleGroup(t, n, b, d)

		for _, m := range []*groupMember{b, d} {
			if err := m.g.Close(); err != nil {
				t.Fatal(err)
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.errs) > 0 {
			t.Fatal(l.errs)
		}
		if len(l.open) > 0 {
			t.Fatalf("OnAssigned never revoked: %v", l.open)
		}
	})
}

// groupTiming is the story's: backend calls time out after a renewal
// period, so a loaded machine (every test suite at once, -race) needs more
// than the 600ms of the election story, or sessions flap and membership
// never stops changing.
var groupTiming = deadline.Config{LeaseDuration: 4 * time.Second, RenewInterval: time.Second}

// settleLimit bounds each settling of the story: a few leases and
// ticks, generous for a loaded machine.
const settleLimit = 45 * time.Second

// settleGroup samples ownership until the members own all n partitions
// fairly, failing at once if a partition ever has two valid owners.
func settleGroup(t *testing.T, n int, ms ...*groupMember) {
	t.Helper()
	lo, hi := n/len(ms), (n+len(ms)-1)/len(ms)
	deadline := time.Now().Add(settleLimit)
	for {
		owners := make(map[int][]*term.Term)
		who := make(map[*term.Term]string)
		fair := true
		for _, m := range ms {
			ts := m.g.Terms()
			fair = fair && len(ts) >= lo && len(ts) <= hi
			for p, tm := range ts {
				owners[p] = append(owners[p], tm)
				who[tm] = m.name
			}
		}
		// The members were read one after the other; a term still valid
		// now was valid at every earlier read (validity never comes back),
		// so two terms of a partition valid in this second pass were valid
		// at one instant.
		for p, ts := range owners {
			var both []string
			for _, tm := range ts {
				if tm.Valid() {
					both = append(both, fmt.Sprintf("%s:%s", who[tm], tm))
				}
			}
			if len(both) > 1 {
				t.Fatalf("partition %d has two valid owners: %v", p, both)
			}
		}
		if fair && len(owners) == n {
			return
		}
		if time.Now().After(deadline) {
			var state []string
			for _, m := range ms {
				snap := m.g.Snapshot()
				state = append(state, fmt.Sprintf("%s: %s, session %s, owns %d, sees %v", m.name, snap.Status, m.s.State(), len(snap.Owned), snap.Members))
			}
			t.Fatalf("not settled within %v: %d of %d partitions owned by %d members: %v", settleLimit, len(owners), n, len(ms), state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
