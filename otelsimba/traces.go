package otelsimba

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
)

// Span and span event names.
const (
	spanTerm         = "simba.term"
	spanElected      = "simba.term.elected"
	spanSessionOpen  = "simba.session.open"
	spanSessionClose = "simba.session.close"
	// spanTermDeadlineNear: session.TermDeadlineNear (WithDeadlineWarning).
	spanTermDeadlineNear = "simba.term.deadline_near"
)

// sessionEventNames are the session events recorded under open terms.
var sessionEventNames = map[session.EventKind]string{
	session.SessionSuspended:      "simba.session.suspended",
	session.SessionLeaseShortened: "simba.session.lease_shortened",
	session.SessionExpired:        "simba.session.expired",
	session.SessionDeadlinePassed: "simba.session.deadline_passed",
}

// trace records the spans and span events of one event.
func (in *Instrumentation) trace(e session.Event) {
	switch e.Kind {
	case session.TermElected:
		in.termElected(e)
	case session.TermRevoked:
		in.termRevoked(e)
	case session.TermDeadlineNear:
		in.termDeadlineNear(e)
	case session.SessionOpened, session.SessionClosed:
		name := spanSessionOpen
		attrs := []attribute.KeyValue{keySession.String(string(e.Session))}
		if e.Kind == session.SessionClosed {
			name = spanSessionClose
		} else {
			attrs = append(attrs, keyGranted.Float64(e.Remaining.Seconds()), keyRenew.Float64(e.RenewEvery.Seconds()))
		}
		// Zero-length: the moment matters, not a duration.
		_, sp := in.tracer.Start(context.Background(), name, trace.WithTimestamp(e.Time),
			trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
		sp.End(trace.WithTimestamp(e.Time))
	default:
		if name, ok := sessionEventNames[e.Kind]; ok {
			in.sessionEvent(name, e)
		}
	}
}

// A term is recorded as two spans, following the usual advice for
// operations too long to wait for (a span is exported only when it ends):
//
//   - "simba.term.elected", the root of the term's trace, zero-length at
//     the term's start and ended at once, so it is exported while the term
//     lives and survives the process. The term's context carries it: leader
//     work nests under a parent that is already exported, even after a
//     kill -9. It links to the previous term's elected span of the name.
//   - "simba.term", its child, from the term's start to its end (the
//     earlier of the end as noticed and the local deadline), started and
//     ended when the term ends, with the reason and the detection delay. A
//     process that dies mid-term never exports it, and nothing exported
//     names it as parent.
//
// What happens to the session while a term is open is a zero-length child
// of each open term's elected span, exported at once (ADR 0201).

// termContext puts the term's elected span in the term's context, so that
// leader work started from that context nests under it. The engine calls it
// through session.WithTermContext with its lock held, so it starts no span:
// a span's start and end run the application's processors and, with a
// synchronous one, its exporter (user code, which may block or call the
// session). The context carries a stand-in whose span context is the
// elected span's once the listener has recorded it (TermElected, delivered
// with no lock held, before the term's callbacks and tasks run).
func (in *Instrumentation) termContext(parent context.Context, e session.Event) context.Context {
	p := &pendingSpan{tp: in.tp, ready: make(chan struct{})}
	p.eng, _ = layer.FromContext(parent)
	in.mu.Lock()
	in.pending[termKey{e.Session, e.Name, e.Token}] = p
	in.mu.Unlock()
	return trace.ContextWithSpan(parent, p)
}

// termElected records the start of a term and, if termContext handed out
// a stand-in for it, makes the stand-in name the elected span.
func (in *Instrumentation) termElected(e session.Event) {
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	p := in.pending[k]
	delete(in.pending, k)
	ot, ok := in.terms[k]
	in.mu.Unlock()
	sc := ot.elected
	if !ok {
		sc = in.startTerm(e)
	}
	if p != nil {
		p.sc = sc // the elected span is ended, so exported, before a child can name it
		close(p.ready)
	}
}

// pendingWait bounds how long leader work waits for the elected span's
// identity: the TermElected event is delivered before the term's
// callbacks, so only a listener stuck ahead of this one makes it wait;
// then leader work starts traces of its own rather than naming a parent
// that may never be exported.
const pendingWait = time.Second

// pendingSpan stands for the term's elected span in the term's context. It
// records nothing (the elected span is ended at once, as a span in the
// context of an ended span would).
type pendingSpan struct {
	noop.Span
	tp     trace.TracerProvider
	eng    layer.Engine // the term's session, to tell a wait for itself
	ready  chan struct{}
	sc     trace.SpanContext // written before ready is closed
	gaveUp atomic.Bool       // a wait timed out: no caller waits again
}

// SpanContext is the elected span's, waiting (at most pendingWait) until
// the listener has recorded it. It does not wait on the session's delivery
// loop (a Direct-executor callback that took a lock, whose term the
// engine hands over before the loop delivers TermElected), which would be
// waiting for itself: there, and once a wait timed out, leader work starts
// a trace of its own.
func (p *pendingSpan) SpanContext() trace.SpanContext {
	select {
	case <-p.ready:
		return p.sc
	default:
	}
	// p as the owner: true only on the loop or in a session-wide callback.
	if p.gaveUp.Load() || p.eng != nil && p.eng.WouldWaitForSelf(context.Background(), p) {
		return trace.SpanContext{}
	}
	t := time.NewTimer(pendingWait)
	defer t.Stop()
	select {
	case <-p.ready:
		return p.sc
	case <-t.C:
		p.gaveUp.Store(true)
		return trace.SpanContext{}
	}
}

// TracerProvider is the Instrumentation's, as an SDK span's would be.
func (p *pendingSpan) TracerProvider() trace.TracerProvider { return p.tp }

// termAttributes are the attributes of both spans of a term.
func termAttributes(e session.Event) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		keyLeaseName.String(e.Name),
		keyToken.String(strconv.FormatUint(e.Token, 10)), // a uint64 does not fit an int64 attribute
		keySession.String(string(e.Session)),
	}, groupAttributes(e.Name)...)
}

// startTerm records the elected span of a term, ended at once, linked to
// the previous term of the same name this Instrumentation saw, and returns
// its span context.
func (in *Instrumentation) startTerm(e session.Event) trace.SpanContext {
	in.mu.Lock()
	prev, hasPrev := in.last[e.Name]
	in.mu.Unlock()
	attrs := termAttributes(e)
	opts := []trace.SpanStartOption{
		// A term is a root span: it begins inside the engine, not inside a
		// request of the application.
		trace.WithNewRoot(),
		trace.WithTimestamp(e.Time),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...),
	}
	if hasPrev {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev,
			Attributes: []attribute.KeyValue{keyLinkKind.String("previous_term")}}))
	}
	_, sp := in.tracer.Start(context.Background(), spanElected, opts...)
	// Ended before anything can start a child of it: a processor exports
	// in the order spans end, so no child can be exported before it.
	sp.End(trace.WithTimestamp(e.Time))
	sc := sp.SpanContext()
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	in.terms[k] = openTerm{elected: sc, start: e.Time, attrs: attrs}
	if len(in.last) >= maxLinkedNames {
		clear(in.last) // bounded memory for processes with many names; links are a help, not a record
	}
	in.last[e.Name] = sc
	in.mu.Unlock()
	return sc
}

// openTerm is what the end of a term needs of its start.
type openTerm struct {
	elected trace.SpanContext
	start   time.Time
	attrs   []attribute.KeyValue
}

// maxLinkedNames bounds the names whose last term is remembered for links.
const maxLinkedNames = 4096

func (in *Instrumentation) termRevoked(e session.Event) {
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	ot, ok := in.terms[k]
	delete(in.terms, k)
	in.mu.Unlock()
	if !ok {
		return // elected before this Instrumentation was listening
	}
	reason := e.Reason.String()
	// The term was never valid past the local deadline: a frozen process
	// notices late, and a span ending when it noticed would overlap its
	// successor's term.
	end := e.Time
	if !e.Deadline.IsZero() && e.Deadline.Before(end) {
		end = e.Deadline
	}
	ctx := trace.ContextWithSpanContext(context.Background(), ot.elected)
	_, sp := in.tracer.Start(ctx, spanTerm, trace.WithTimestamp(ot.start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(ot.attrs...),
		trace.WithAttributes(keyReason.String(reason), keyDetection.Float64(e.Time.Sub(end).Seconds())))
	if !e.Reason.Voluntary() {
		// The node did not choose to end it: an operator wants to find these.
		sp.SetStatus(codes.Error, reason)
	}
	sp.End(trace.WithTimestamp(end))
}

// sessionEvent records e as a zero-length child of every open term's
// elected span of e's session (exported at once, so an operator sees a
// suspension while the term lives), or, for a shortened lease before any
// term, as a root of its own.
func (in *Instrumentation) sessionEvent(name string, e session.Event) {
	attrs := []attribute.KeyValue{keySession.String(string(e.Session))}
	switch e.Kind {
	case session.SessionLeaseShortened:
		attrs = append(attrs, keyGranted.Float64(e.Remaining.Seconds()), keyRenew.Float64(e.RenewEvery.Seconds()))
	case session.SessionSuspended:
		if e.Err != nil {
			attrs = append(attrs, keyError.String(e.Err.Error()))
		}
	}
	in.mu.Lock()
	var open []trace.SpanContext
	for k, ot := range in.terms {
		if k.session == e.Session {
			open = append(open, ot.elected)
		}
	}
	in.mu.Unlock()
	for _, sc := range open {
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		_, sp := in.tracer.Start(ctx, name, trace.WithTimestamp(e.Time),
			trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
		sp.End(trace.WithTimestamp(e.Time))
	}
	if len(open) == 0 && e.Kind == session.SessionLeaseShortened {
		// Usually published as the session opens, before any term: keep
		// the once-per-session warning visible.
		_, sp := in.tracer.Start(context.Background(), name, trace.WithNewRoot(), trace.WithTimestamp(e.Time),
			trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
		sp.End(trace.WithTimestamp(e.Time))
	}
}

// termDeadlineNear records session.TermDeadlineNear as a zero-length child
// of the term's elected span, exported at once: the warning is visible
// while the term still lives, and after a crash that follows it.
func (in *Instrumentation) termDeadlineNear(e session.Event) {
	in.mu.Lock()
	ot, ok := in.terms[termKey{e.Session, e.Name, e.Token}]
	in.mu.Unlock()
	if !ok {
		return
	}
	ctx := trace.ContextWithSpanContext(context.Background(), ot.elected)
	_, sp := in.tracer.Start(ctx, spanTermDeadlineNear, trace.WithTimestamp(e.Time),
		trace.WithAttributes(keySession.String(string(e.Session)), keyLeft.Float64(e.Remaining.Seconds())),
		trace.WithSpanKind(trace.SpanKindInternal))
	sp.SetStatus(codes.Error, "renewals late: the term's deadline is near")
	sp.End(trace.WithTimestamp(e.Time))
}
