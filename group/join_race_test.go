package group_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

// Two Joins of one group on one session, at the same moment: exactly one
// becomes a member, the other fails with session.ErrAlreadyStarted. Before
// the fix both passed the "already a member" check (a snapshot read
// before either registered its member record) and both joined, under two
// member IDs, competing with each other for the same partitions.
func TestConcurrentJoinsOfOneGroupOnOneSessionMakeOneMember(t *testing.T) {
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 1000 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		gs := make([]*group.Group, 2)
		errs := make([]error, 2)
		for k := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				gs[k], errs[k] = group.Join(s, "race", 2)
			}()
		}
		close(start)
		wg.Wait()
		joined := 0
		for k := range gs {
			switch {
			case errs[k] == nil:
				joined++
			case !errors.Is(errs[k], session.ErrAlreadyStarted):
				t.Fatalf("iteration %d: Join: %v, want nil or an error wrapping ErrAlreadyStarted", i, errs[k])
			}
		}
		if joined != 1 {
			t.Fatalf("iteration %d: %d of two concurrent Joins of one group on one session succeeded, want 1 (%v)", i, joined, errs)
		}
		for _, g := range gs {
			if g != nil {
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
