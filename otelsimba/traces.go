package otelsimba

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/simba-go/simba/session"
)

// Span and span event names.
const (
	spanTerm         = "simba.term"
	spanElected      = "simba.term.elected"
	spanSessionOpen  = "simba.session.open"
	spanSessionClose = "simba.session.close"
)

// sessionEventNames are the session events added to open term spans.
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

// termContext starts a term's span as the term begins (the engine calls
// it through session.WithTermContext) and puts it in the term's context, so
// that leader work started from that context nests under the term.
func (in *Instrumentation) termContext(parent context.Context, e session.Event) context.Context {
	sp := in.startTerm(e)
	return trace.ContextWithSpan(parent, sp)
}

// termElected records the start of a term: the span of the whole term
// (unless termContext started it already) and a zero-length
// "simba.term.elected" span under it, exported at once, so that a term
// shows while it lasts and a leader killed mid-term still left a trace.
func (in *Instrumentation) termElected(e session.Event) {
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	sp := in.spans[k]
	in.mu.Unlock()
	if sp == nil {
		sp = in.startTerm(e)
	}
	ctx := trace.ContextWithSpan(context.Background(), sp)
	_, el := in.tracer.Start(ctx, spanElected, trace.WithTimestamp(e.Time), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyLeaseName.String(e.Name), keyToken.String(strconv.FormatUint(e.Token, 10)), keySession.String(string(e.Session))))
	el.End(trace.WithTimestamp(e.Time))
}

// startTerm starts and records the span of a term, linked to the previous
// term of the same name this Instrumentation saw.
func (in *Instrumentation) startTerm(e session.Event) trace.Span {
	in.mu.Lock()
	prev, hasPrev := in.last[e.Name]
	in.mu.Unlock()
	opts := []trace.SpanStartOption{
		// A term is a root span: it begins inside the engine, not inside a
		// request of the application.
		trace.WithNewRoot(),
		trace.WithTimestamp(e.Time),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			keyLeaseName.String(e.Name),
			keyToken.String(strconv.FormatUint(e.Token, 10)), // a uint64 does not fit an int64 attribute
			keySession.String(string(e.Session)),
		),
		trace.WithAttributes(groupAttributes(e.Name)...),
	}
	if hasPrev {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev,
			Attributes: []attribute.KeyValue{keyLinkKind.String("previous_term")}}))
	}
	_, sp := in.tracer.Start(context.Background(), spanTerm, opts...)
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	old := in.spans[k]
	in.spans[k] = sp
	if len(in.last) >= maxLinkedNames {
		clear(in.last) // bounded memory for processes with many names; links are a help, not a record
	}
	in.last[e.Name] = sp.SpanContext()
	in.mu.Unlock()
	if old != nil { // cannot happen with the engine's pairing; never leak a span
		old.End(trace.WithTimestamp(e.Time))
	}
	return sp
}

// maxLinkedNames bounds the names whose last term is remembered for links.
const maxLinkedNames = 4096

func (in *Instrumentation) termRevoked(e session.Event) {
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	sp := in.spans[k]
	delete(in.spans, k)
	in.mu.Unlock()
	if sp == nil {
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
	sp.SetAttributes(keyReason.String(reason), keyDetection.Float64(e.Time.Sub(end).Seconds()))
	if !e.Reason.Voluntary() {
		// The node did not choose to end it: an operator wants to find these.
		sp.SetStatus(codes.Error, reason)
	}
	sp.End(trace.WithTimestamp(end))
}

// sessionEvent adds a span event to every open term span of e's session.
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
	var open []trace.Span
	for k, sp := range in.spans {
		if k.session == e.Session {
			open = append(open, sp)
		}
	}
	in.mu.Unlock()
	for _, sp := range open {
		sp.AddEvent(name, trace.WithTimestamp(e.Time), trace.WithAttributes(attrs...))
	}
	if len(open) == 0 && e.Kind == session.SessionLeaseShortened {
		// Usually published as the session opens, before any term: keep
		// the once-per-session warning visible as a zero-length span.
		_, sp := in.tracer.Start(context.Background(), name, trace.WithNewRoot(), trace.WithTimestamp(e.Time),
			trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
		sp.End(trace.WithTimestamp(e.Time))
	}
}
