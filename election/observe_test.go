package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// inspectOnly hides the memory backend's release notices: observers poll.
type inspectOnly struct {
	session.Backend
	driver.Inspector
}

// collect reads observations into a slice until the channel closes.
func collect(ch <-chan election.Observation) (get func() []election.Observation, done <-chan struct{}) {
	var mu sync.Mutex
	var got []election.Observation
	d := make(chan struct{})
	go func() {
		defer close(d)
		for o := range ch {
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
		}
	}()
	return func() []election.Observation {
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		return append([]election.Observation(nil), got...)
	}, d
}

func TestLeaderOf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		a, err := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil), session.WithIdentity("node-a", map[string]string{"addr": "10.0.0.1:8080"}))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		watcher := open(t, b.NewClient())
		if _, ok, err := election.LeaderOf(context.Background(), watcher, "billing"); ok || err != nil {
			t.Fatalf("LeaderOf before any election = %v, %v; want none", ok, err)
		}
		e, _ := election.Start(a, "billing")
		synctest.Wait()
		h, ok, err := election.LeaderOf(context.Background(), watcher, "billing")
		if err != nil || !ok {
			t.Fatalf("LeaderOf = %v, %v", ok, err)
		}
		if h.Owner.Identity != "node-a" || h.Owner.Metadata["addr"] != "10.0.0.1:8080" || h.Session != a.ID() || h.Token != e.Term().Token() || h.Remaining <= 0 {
			t.Fatalf("LeaderOf = %+v, want node-a's term %d on %s", h, e.Term().Token(), a.ID())
		}
		if _, _, err := election.LeaderOf(context.Background(), watcher, "bad name\x00"); !errors.Is(err, deadline.ErrInvalidName) {
			t.Fatalf("LeaderOf(invalid) = %v, want ErrInvalidName", err)
		}
		plainSession := open(t, struct{ session.Backend }{b.NewClient()})
		if _, _, err := election.LeaderOf(context.Background(), plainSession, "billing"); !errors.Is(err, session.ErrNoInspector) {
			t.Fatalf("LeaderOf without an Inspector = %v, want ErrNoInspector", err)
		}
		if _, err := election.Observe(context.Background(), plainSession, "billing"); !errors.Is(err, session.ErrNoInspector) {
			t.Fatalf("Observe without an Inspector = %v, want ErrNoInspector", err)
		}
		_ = e.Stop(context.Background())
	})
}

// TestObserveSeesEveryHandover: none, then a's term, then b's after a
// steps down; with release notices the change is seen at once, not a poll
// period later.
func TestObserveSeesEveryHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		na, nb := open(t, b.NewClient()), open(t, b.NewClient())
		watcher := open(t, b.NewClient())
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := election.Observe(ctx, watcher, "billing", election.PollEvery(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		get, done := collect(ch)
		if got := get(); len(got) != 1 || got[0].Held {
			t.Fatalf("first observation = %+v, want none", got)
		}
		ea, _ := election.Start(na, "billing")
		synctest.Wait()
		advance(time.Hour) // no notice for a new holder: the poll finds it
		got := get()
		if len(got) != 2 || !got[1].Held || got[1].Holder.Session != na.ID() {
			t.Fatalf("after a leads: %+v", got)
		}
		eb, _ := election.Start(nb, "billing")
		synctest.Wait()
		start := time.Now()
		if err := ea.StepDown(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The release notice made the observer look at once: it saw the
		// lease free or already b's, within no virtual time.
		got = get()
		if len(got) < 3 || time.Since(start) != 0 {
			t.Fatalf("after a steps down (%v later): %+v, want a change seen at once", time.Since(start), got)
		}
		advance(time.Hour)
		got = get()
		last := got[len(got)-1]
		if !last.Held || last.Holder.Session != nb.ID() || last.Holder.Token <= got[1].Holder.Token {
			t.Fatalf("after b leads: %+v", got)
		}
		cancel()
		<-done
		_ = eb.Stop(context.Background())
	})
}

// TestObservePollsWithoutNotices: on a backend without release notices the
// change is seen at the next poll.
func TestObservePollsWithoutNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		na := open(t, b.NewClient())
		wb := b.NewClient()
		watcher := open(t, inspectOnly{wb, wb})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := election.Observe(ctx, watcher, "billing", election.PollEvery(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		get, done := collect(ch)
		ea, _ := election.Start(na, "billing")
		synctest.Wait()
		if got := get(); len(got) != 1 {
			t.Fatalf("before the poll: %+v", got)
		}
		advance(3 * time.Second)
		if got := get(); len(got) != 2 || got[1].Holder.Session != na.ID() {
			t.Fatalf("after the poll: %+v", got)
		}
		_ = ea.Stop(context.Background())
		advance(3 * time.Second)
		if got := get(); len(got) != 3 || got[2].Held {
			t.Fatalf("after the stop and a poll: %+v", got)
		}
		advance(30 * time.Second) // nothing changes: nothing more is sent
		if got := get(); len(got) != 3 {
			t.Fatalf("repeated observations without a change: %+v", got)
		}
		// The channel closes with the session.
		_ = watcher.Close()
		<-done
	})
}
