package otelsimba_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/trace"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// freezable is the running process's Env that can be frozen like a
// process stopped by SIGSTOP or a long GC pause: while frozen no timer
// fires and no backend reply is handled; on thaw, everything that came due
// runs at once, late.
type freezable struct {
	session.Env
	mu     sync.Mutex
	thawed chan struct{} // nil while not frozen
}

func (f *freezable) freeze() { f.mu.Lock(); f.thawed = make(chan struct{}); f.mu.Unlock() }

func (f *freezable) thaw() {
	f.mu.Lock()
	close(f.thawed)
	f.thawed = nil
	f.mu.Unlock()
}

func (f *freezable) wait() {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (f *freezable) AfterFunc(d time.Duration, fn func()) func() bool {
	return f.Env.AfterFunc(d, func() { f.wait(); fn() })
}

func (f *freezable) Call(op, reply func()) {
	f.Env.Call(op, func() { f.wait(); reply() })
}

// TestHandoverAndFrozenLeaderTrace: a voluntary handover (a to b), then b
// frozen past its deadline while a takes over. The exported term spans of
// "billing" follow one another without overlapping, each linked to the
// previous one; the frozen term's span ends at its local deadline with the
// detection delay; the leader task's spans nest under their term.
func TestHandoverAndFrozenLeaderTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans)).Tracer("app")
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		cfg := deadline.Config{LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second}
		work := func(ctx context.Context, tm *term.Term) error {
			if !tm.Valid() { // a task checks its term before acting
				return nil
			}
			_, sp := tracer.Start(ctx, "work")
			<-time.After(100 * time.Millisecond)
			sp.End()
			return nil
		}
		node := func(env session.Env) (*session.Session, *election.Election) {
			s, err := session.Open(context.Background(), f.inst.Backend(b.NewClient()), session.WithConfig(cfg),
				session.WithLogger(nil), session.WithEnv(env), f.inst.Option())
			if err != nil {
				t.Fatal(err)
			}
			e, err := election.Start(s, "billing", election.Every(time.Second, work, nil))
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			return s, e
		}
		sa, ea := node(session.SystemEnv())
		envB := &freezable{Env: session.SystemEnv()}
		sb, eb := node(envB)
		advance(3 * time.Second)
		if ea.Status() != election.Leader {
			t.Fatal("a does not lead")
		}
		// A voluntary handover: a steps down (for 20s), b takes over.
		if err := ea.StepDown(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		advance(3 * time.Second)
		if eb.Status() != election.Leader {
			t.Fatal("b does not lead after the handover")
		}
		// b freezes for 40s: its session expires on the backend, a takes
		// over, and b notices only when it thaws.
		envB.freeze()
		advance(40 * time.Second)
		if ea.Status() != election.Leader {
			t.Fatal("a did not take over from the frozen b")
		}
		envB.thaw()
		advance(3 * time.Second)
		_ = eb.Stop(context.Background())
		_ = ea.Stop(context.Background())
		_ = sa.Close()
		_ = sb.Close()

		terms := f.ended("simba.term")
		sort.Slice(terms, func(i, j int) bool { return terms[i].StartTime().Before(terms[j].StartTime()) })
		if len(terms) != 3 {
			t.Fatalf("term spans = %d, want 3 (a, b, a)", len(terms))
		}
		electedByID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range f.ended("simba.term.elected") {
			electedByID[s.SpanContext().SpanID()] = s
		}
		for i := 1; i < len(terms); i++ {
			prev, next := terms[i-1], terms[i]
			if next.StartTime().Before(prev.EndTime()) {
				t.Errorf("term %d [%v, %v] overlaps term %d starting %v", i-1, prev.StartTime(), prev.EndTime(), i, next.StartTime())
			}
			// Links join the elected spans, which are always exported.
			el := electedByID[next.Parent().SpanID()]
			if l := el.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != prev.Parent().SpanID() {
				t.Errorf("term %d's elected span links %v, want the previous term's %v", i, l, prev.Parent().SpanID())
			}
		}
		frozen := terms[1]
		// On thaw the deadline timer or the late renewal's "expired" comes
		// first: either way the term was over at its deadline.
		if v, _ := attr(frozen, "simba.revoke.reason"); v.AsString() != "DEADLINE_PASSED" && v.AsString() != "SESSION_EXPIRED" {
			t.Fatalf("frozen term ended with %q, want DEADLINE_PASSED or SESSION_EXPIRED", v.AsString())
		}
		delay, _ := attr(frozen, "simba.term.detection_delay")
		if delay.AsFloat64() < 20 {
			t.Fatalf("detection delay of the frozen term = %vs, want the time frozen past its deadline (over 20s)", delay.AsFloat64())
		}
		if v, _ := attr(terms[0], "simba.term.detection_delay"); v.AsFloat64() != 0 {
			t.Fatalf("detection delay of a voluntary end = %v, want 0", v.AsFloat64())
		}
		if got := len(f.ended("simba.term.elected")); got != 3 {
			t.Fatalf("simba.term.elected spans = %d, want 3", got)
		}
		// A term's work nests under its elected span (exported as the term
		// began) and falls within the term's simba.term span.
		termOf := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range terms {
			termOf[s.Parent().SpanID()] = s
		}
		works := f.ended("work")
		if len(works) < 5 {
			t.Fatalf("work spans = %d, want the task's runs", len(works))
		}
		for _, w := range works {
			tm, ok := termOf[w.Parent().SpanID()]
			if !ok {
				t.Fatalf("work span at %v is not under a term's elected span (parent %v)", w.StartTime(), w.Parent().SpanID())
			}
			if w.StartTime().Before(tm.StartTime()) || w.StartTime().After(tm.EndTime()) {
				t.Errorf("work at %v outside its term [%v, %v]", w.StartTime(), tm.StartTime(), tm.EndTime())
			}
		}
		for _, s := range f.spans.Ended() {
			if s.InstrumentationScope().Name == "github.com/simba-go/simba/otelsimba" && s.InstrumentationScope().Version == "" {
				t.Fatal("spans carry no instrumentation version")
			}
		}
		m, ok := find(f.collect(), "simba.backend.call.duration")
		h, isHist := m.Data.(metricdata.Histogram[float64])
		if !ok || !isHist || m.Unit != "s" {
			t.Fatalf("simba.backend.call.duration = %+v, want a histogram in seconds", m)
		}
		ops := map[string]uint64{}
		for _, dp := range h.DataPoints {
			v, _ := dp.Attributes.Value("simba.backend.operation")
			ops[v.AsString()] += dp.Count
		}
		for _, op := range []string{"open", "renew", "acquire", "release", "close"} {
			if ops[op] == 0 {
				t.Errorf("no %s calls in simba.backend.call.duration (%v)", op, ops)
			}
		}
	})
}
