package otelsimba_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/otelsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// askingProcessor is a span processor that, as a user's processor or
// synchronous exporter may, calls the session while a span ends.
type askingProcessor struct {
	s     atomic.Pointer[session.Session]
	asked chan session.State
}

func (p *askingProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *askingProcessor) OnEnd(sp sdktrace.ReadOnlySpan) {
	if s := p.s.Load(); s != nil && sp.Name() == "simba.term.elected" {
		select {
		case p.asked <- s.State():
		default:
		}
	}
}
func (p *askingProcessor) Shutdown(context.Context) error   { return nil }
func (p *askingProcessor) ForceFlush(context.Context) error { return nil }

// The elected span is exported (a synchronous processor runs the
// exporter, user code) with no engine lock held: a processor that calls
// the session, or an exporter that blocks, neither deadlocks nor stalls
// the engine (the spec: no internal lock is held while user code runs).
// Leader work still nests under the elected span, exported first.
func TestElectedSpanEndsWithoutTheEngineLock(t *testing.T) {
	p := &askingProcessor{asked: make(chan session.State, 1)}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	if err != nil {
		t.Fatal(err)
	}
	p.s.Store(s)
	work := make(chan struct{})
	e, err := election.Start(s, "a", election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
		_, sp := tp.Tracer("app").Start(ctx, "app.work")
		sp.End()
		close(work)
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.asked:
	case <-time.After(10 * time.Second):
		// The engine is stuck with its lock held: no cleanup can run.
		t.Fatal("the span processor's call to the session did not return: the elected span ended with the engine's lock held")
	}
	<-work
	_ = e.Stop(context.Background())
	_ = s.Close()
	var elected, app sdktrace.ReadOnlySpan
	for i, sp := range rec.Ended() {
		switch sp.Name() {
		case "simba.term.elected":
			elected = sp
		case "app.work":
			app = sp
			if elected == nil {
				t.Fatalf("app.work exported (#%d) before its parent", i)
			}
		}
	}
	if elected == nil || app == nil {
		t.Fatal("missing spans")
	}
	if app.Parent().SpanID() != elected.SpanContext().SpanID() {
		t.Fatalf("app.work's parent %v, want the elected span %v", app.Parent().SpanID(), elected.SpanContext().SpanID())
	}
}

// A lock acquired from a Direct-executor callback holds up the delivery
// loop that records the lock's elected span: a span started from the
// lock's term context there must not wait for it (it used to wait the
// stand-in's 5 s bound, holding every callback of the session up).
func TestSpanUnderALockTakenOnTheDeliveryLoopDoesNotWait(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	took := make(chan time.Duration, 1)
	e, err := election.Start(s, "a", election.WithExecutor(election.Direct{}), election.WithListener(election.Funcs{
		Elected: func(tm *term.Term) {
			h, err := lock.Acquire(tm.Context(), s, "x")
			if err != nil {
				t.Error(err)
				took <- 0
				return
			}
			start := time.Now()
			_, sp := tp.Tracer("app").Start(h.Term().Context(), "app.locked")
			sp.End()
			took <- time.Since(start)
			_ = h.Close()
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(context.Background()) }()
	select {
	case d := <-took:
		if d > time.Second {
			t.Fatalf("starting a span under the lock's term took %v on the delivery loop", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the elected callback never ran")
	}
}

// A lock's holder gets its term from Acquire, possibly before the
// listener has recorded the term's elected span: a span started from the
// lock's context still nests under that span, exported first.
func TestSpanUnderAnAcquiredLockNestsUnderItsTerm(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for i := range 50 {
		h, err := lock.Acquire(context.Background(), s, "x")
		if err != nil {
			t.Fatal(err)
		}
		_, sp := tp.Tracer("app").Start(h.Term().Context(), "app.locked")
		sp.End()
		_ = h.Close()
		var parent trace.SpanID
		for _, x := range rec.Ended() {
			if x.Name() == "simba.term.elected" {
				parent = x.SpanContext().SpanID()
			}
		}
		ended := rec.Ended()
		last := ended[len(ended)-1]
		for _, x := range ended {
			if x.Name() == "app.locked" {
				last = x
			}
		}
		if !last.Parent().IsValid() || last.Parent().SpanID() != parent {
			t.Fatalf("round %d: app.locked's parent %v, want the lock's elected span %v", i, last.Parent().SpanID(), parent)
		}
	}
}
