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

func (in *Instrumentation) termElected(e session.Event) {
	// A term is a root span: it begins inside the engine, not inside a
	// request of the application.
	_, sp := in.tracer.Start(context.Background(), spanTerm,
		trace.WithNewRoot(),
		trace.WithTimestamp(e.Time),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			keyLeaseName.String(e.Name),
			keyToken.String(strconv.FormatUint(e.Token, 10)), // a uint64 does not fit an int64 attribute
			keySession.String(string(e.Session)),
		),
		trace.WithAttributes(groupAttributes(e.Name)...))
	k := termKey{e.Session, e.Name, e.Token}
	in.mu.Lock()
	old := in.spans[k]
	in.spans[k] = sp
	in.mu.Unlock()
	if old != nil { // cannot happen with the engine's pairing; never leak a span
		old.End(trace.WithTimestamp(e.Time))
	}
}

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
	sp.SetAttributes(keyReason.String(reason))
	if !e.Reason.Voluntary() {
		// The node did not choose to end it: an operator wants to find these.
		sp.SetStatus(codes.Error, reason)
	}
	sp.End(trace.WithTimestamp(e.Time))
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
