package session_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/term"
)

// streamOfReleases has session a hold n names that session b waits for,
// then release them one at a time, gap apart (as a rebalance's old owners
// do, each partition when its task returns); it returns b's Acquire calls
// from the first release until b holds all n.
func streamOfReleases(t *testing.T, n int, gap time.Duration, paced bool) int {
	f := newFixture(t, deadline.Config{})
	g := openOn(t, f.b.NewClient(), deadline.Config{})
	var held []layer.Claim
	var waiting []*recorder
	for i := range n {
		name := fmt.Sprintf("p.%d", i)
		c, _ := f.claim(name)
		held = append(held, c)
		r := &recorder{}
		wc, err := layer.MustOf(g.s).Claim(name, r)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(g.s).Do(func() {
			if paced {
				wc.PaceNotices()
			}
			wc.Want(true)
		})
		waiting = append(waiting, r)
	}
	synctest.Wait()
	before := g.b.Stats().Acquire
	for _, c := range held {
		layer.MustOf(f.s).Do(func() { c.Want(false); c.Release(term.Stopped, nil) })
		advance(gap)
	}
	advance(f.cfg.RetryDelay(0)) // the window of the last paced notice ends
	for i, r := range waiting {
		if ts := r.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatalf("p.%d: b holds %d terms after every release, want 1 valid", i, len(ts))
		}
	}
	return g.b.Stats().Acquire - before
}

// A stream of 20 release notices, 50ms apart: unpaced (an election's
// claims), each is answered by its own Acquire; paced (a group's
// partitions), one Acquire answers the first at once and one more every
// window (half a renewal interval) answers those that arrived in it: here
// 2 calls, or 3 if a candidate tick falls inside the second.
func TestPacedNoticesAreOneAcquirePerWindow(t *testing.T) {
	const n, gap = 20, 50 * time.Millisecond
	var unpaced, paced int
	t.Run("unpaced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { unpaced = streamOfReleases(t, n, gap, false) })
	})
	t.Run("paced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { paced = streamOfReleases(t, n, gap, true) })
	})
	t.Logf("Acquire calls to take %d partitions released %v apart: %d unpaced, %d paced", n, gap, unpaced, paced)
	if unpaced != n {
		t.Errorf("unpaced: %d Acquire calls for %d notices, want one each", unpaced, n)
	}
	if paced < 2 || paced > 3 {
		t.Errorf("paced: %d Acquire calls for %d notices over %v, want 2 (3 with a candidate tick)", paced, n, n*gap)
	}
}

// A lone paced notice waits for nothing: the first notice of a window is
// answered at once.
func TestLonePacedNoticeIsAnsweredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		g := openOn(t, f.b.NewClient(), deadline.Config{})
		ca, _ := f.claim("p.0")
		rb := &recorder{}
		cb, err := layer.MustOf(g.s).Claim("p.0", rb)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(g.s).Do(func() { cb.PaceNotices(); cb.Want(true) })
		synctest.Wait()
		layer.MustOf(f.s).Do(func() { ca.Want(false); ca.Release(term.Stopped, nil) })
		synctest.Wait() // no time passes: the notice, not a tick, wakes b
		if ts := rb.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatal("b did not take over at once on a lone paced notice")
		}
	})
}

// A holder told that its own lease is free (its session ended at the
// server by someone else: an operator's `etcdctl lease revoke`) renews at
// once and ends the term, without waiting for its next renewal tick: the
// candidates heard the same notice and take the name in a round trip.
func TestNoticeForAHeldNameRenewsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("x")
		if ts := r.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatal("the claim did not win")
		}
		f.b.Expire(f.s.ID())
		synctest.Wait() // no time passes: the notice, not a tick, ends the term
		if ts := r.terms(); ts[0].Valid() {
			t.Fatal("the term is still valid after its session ended at the server and the holder was told")
		}
		if l := r.losses(); len(l) != 1 || l[0].reason != term.SessionExpired {
			t.Fatalf("losses %+v, want one SESSION_EXPIRED", l)
		}
	})
}

// The notice comes while a renewal sent before the delete is in flight:
// that reply still lists the lease, so the holder renews again when it
// ends instead of waiting for its next tick.
func TestNoticeDuringARenewalRenewsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := deadline.Config{}.WithDefaults()
		f := newFixture(t, deadline.Config{})
		_, r := f.claim("x")
		if ts := r.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatal("the claim did not win")
		}
		f.b.SetReplyDelay(100 * time.Millisecond)
		advance(cfg.RenewInterval + 10*time.Millisecond) // the tick's renewal took effect; its reply is delayed
		f.b.Expire(f.s.ID())
		f.b.SetReplyDelay(0)
		advance(200 * time.Millisecond) // the delayed reply, then the second renewal
		if ts := r.terms(); ts[0].Valid() {
			t.Fatal("the term is still valid: the renewal in flight at the notice answered for it until the next tick")
		}
	})
}
