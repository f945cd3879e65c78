package group_test

import (
	"context"
	"maps"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// olderMember holds a member record of the form versions before ADR 0189
// wrote (<group>:m:<id>, no partition count), renewing it until the test
// ends, and takes no partition: a member of an older version, configured
// for fewer partitions than the newer members or finding the ones it
// computes as its own held by them. Only the raw driver can make such a
// lease now: the session refuses the name for anything but a group.
func olderMember(t *testing.T, b *memory.Backend, name string) {
	t.Helper()
	c := b.NewClient()
	ctx := context.Background()
	open, err := c.Open(ctx, driver.OpenRequest{LeaseDuration: deadline.DefaultLeaseDuration})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Acquire(ctx, driver.AcquireRequest{ID: open.ID, Names: []string{name}})
	if err != nil || len(got.Results) != 1 || got.Results[0].Token == 0 {
		t.Fatalf("older member's record %q: %+v, %v", name, got, err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				_ = c.Close(ctx, open.ID)
				return
			case <-time.After(deadline.DefaultLeaseDuration / 3):
				_, _ = c.Renew(ctx, driver.RenewRequest{ID: open.ID})
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// A rolling deploy from a version whose member records carry no count
// that also raises the count (12 → 16): the newer members read the older
// record as a member at their own count and left it its share, which it
// never takes when the share holds a partition at or above its count (or
// one the newer members hold what it computes as its own). Those
// partitions stayed unowned for as long as the older member lived. Now
// the newer members take what an older member's share leaves unheld.
func TestAnOlderMembersShareIsNotStranded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r := newRecord()
		olderMember(t, b, "orders:m:old")
		const n = 16
		a := join(t, openSession(t, b), "a", n, r)
		bb := join(t, openSession(t, b), "b", n, r)
		advance(settle)
		who := make([]int, n)
		for _, g := range []*group.Group{a, bb} {
			for p, tm := range g.Terms() {
				if tm.Valid() {
					who[p]++
				}
			}
		}
		for p, k := range who {
			if k != 1 {
				t.Errorf("partition %d has %d owners beside an older member's record (owners per partition %v)", p, k, who)
			}
		}
		tokens := func() map[int]uint64 {
			out := map[int]uint64{}
			for _, g := range []*group.Group{a, bb} {
				for p, tm := range g.Terms() {
					if tm.Valid() {
						out[p] = tm.Token()
					}
				}
			}
			return out
		}
		before := tokens()
		advance(2 * settle) // nothing moves once settled
		if after := tokens(); !maps.Equal(before, after) {
			t.Errorf("partitions moved beside an older member's record: %v, then %v", before, after)
		}
		r.check(t)
	})
}

// fixedTicks is the running process with the shortest candidate ticks
// (jitter fixed at 0: polls every 2.5 s), so that the test's polls fall
// where it computes them.
type fixedTicks struct{ session.Env }

func (fixedTicks) Jitter() float64 { return 0 }

// An outage of the whole backend that the sessions survive (13 s, started
// 0.1 s after a renewal, with the default 15 s lease) moved nothing before
// ADR 0190. With its blind rule every member whose last poll was more than
// a lease before a failed one withdrew: all three, every partition handed
// over and taken again, across an outage their terms outlived. A poll that
// fails while the session cannot renew either is no sign of blindness: the
// session's own deadline deals with such an outage (ADR 0226).
func TestAnOutageTheSessionsSurviveMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBackend(t)
		r := newRecord()
		const n = 12
		var es errs
		var clients []*memory.Backend
		var gs []*group.Group
		for _, id := range []string{"a", "b", "c"} {
			c := b.NewClient()
			clients = append(clients, c)
			s, err := session.Open(context.Background(), c, session.WithLogger(nil), session.WithEnv(fixedTicks{session.SystemEnv()}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			gs = append(gs, join(t, s, id, n, r, group.OnError(es.add)))
		}
		advance(settle)
		owned(t, n, gs...)
		tokens := func() map[int]uint64 {
			out := map[int]uint64{}
			for _, g := range gs {
				for p, tm := range g.Terms() {
					if tm.Valid() {
						out[p] = tm.Token()
					}
				}
			}
			return out
		}
		before := tokens()
		// Renewals every 5 s from the opens at 0: the outage starts 0.1 s
		// after one, so every session's deadline (14.8 s after it) is
		// past its end.
		now := time.Since(t0) % (deadline.DefaultLeaseDuration / 3)
		advance(deadline.DefaultLeaseDuration/3 - now + 100*time.Millisecond)
		for _, c := range clients {
			c.FailCalls(errCannotList)
		}
		advance(13000 * time.Millisecond)
		for _, c := range clients {
			c.FailCalls(nil)
		}
		advance(2 * settle)
		if k := es.count(group.ErrBlind); k != 0 {
			t.Errorf("%d members withdrew as blind during an outage their sessions survived", k)
		}
		if after := tokens(); !maps.Equal(before, after) {
			t.Errorf("partitions moved across an outage the sessions survived: %v, then %v", before, after)
		}
		r.check(t)
	})
}
