package otelsimba_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

// session.TermDeadlineNear (session.WithDeadlineWarning) is a child of the
// term's elected span, exported while the term still lives (issue 25).
func TestDeadlineNearIsExportedUnderTheLivingTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s, err := session.Open(context.Background(), b, session.WithLogger(nil), f.inst.Option(),
			session.WithDeadlineWarning(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		synctest.Wait()
		e := f.lead(s, "indexer")
		tm := e.Term()
		b.FailCalls(errors.New("connection refused"))
		advance(12 * time.Second) // default lease 15s: deadline 14.8s after the last renewal was sent (t=0)
		if !tm.Valid() {
			t.Fatal("the term ended before the warning's margin")
		}
		near := f.ended("simba.term.deadline_near")
		elected := f.ended("simba.term.elected")
		if len(near) != 1 || len(elected) != 1 || near[0].Parent().SpanID() != elected[0].SpanContext().SpanID() {
			t.Fatalf("deadline_near spans %d (elected %d): want one, a child of the term's elected span", len(near), len(elected))
		}
		if got := near[0].StartTime(); !got.Equal(elected[0].StartTime().Add(11800 * time.Millisecond)) {
			t.Fatalf("deadline_near at %v after the election, want 11.8s (the deadline 14.8s minus the margin 3s)", got.Sub(elected[0].StartTime()))
		}
		b.FailCalls(nil)
	})
}
