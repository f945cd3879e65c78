// Package otelsimba turns the events of a Simba session into OpenTelemetry
// traces and metrics.
//
// Create an [Instrumentation] with [New] and pass its listener to the
// session:
//
//	inst, err := otelsimba.New() // the global TracerProvider and MeterProvider
//	s, err := session.Open(ctx, inst.Backend(backend), inst.Option())
//	stop := inst.Observe(s) // optional: the simba.session.remaining gauge
//
// # Traces
//
// A term is two spans, because a span is exported only when it ends and a
// term can last for days or end with the process (ADR 0201):
//
//   - "simba.term.elected": the root of the term's trace, zero-length at the
//     term's start, exported at once. It is put into the term's context
//     (through session.WithTermContext, which [Instrumentation.Option]
//     installs), so spans that leader work starts from that context nest
//     under a parent that is already exported: the trace reads while the
//     term lives, and after a kill -9 no exported span lacks its parent.
//     It links to the previous term's elected span of the same name this
//     Instrumentation saw (link attribute simba.link=previous_term).
//   - "simba.term": its child, covering the whole term, recorded when the
//     term ends. It ends at the earlier of the moment the engine noticed
//     the end and the session's local deadline (a frozen process notices
//     late, but its term was over at the deadline), with
//     simba.term.detection_delay (seconds between the two) and
//     simba.revoke.reason. A term that ends involuntarily
//     (DEADLINE_PASSED, SESSION_EXPIRED, TAKEN_OVER) gets an Error status
//     with the reason as description; a voluntary end (STOPPED,
//     STEPPED_DOWN) leaves the status unset. A process that dies mid-term
//     never records it.
//
// Both carry simba.lease.name, simba.term.token (a string: tokens are
// uint64) and simba.session.id.
//
// What happens to the session while a term is open is a zero-length child
// span of every open term's elected span of that session, exported at
// once: simba.session.suspended (with the error),
// simba.session.lease_shortened (granted time and new renewal period),
// simba.session.expired and simba.session.deadline_passed.
// Opening and closing a backend session are recorded as zero-length spans
// "simba.session.open" and "simba.session.close" with simba.session.id;
// a lease shortened while no term is open (the usual case: it is known as
// the session opens) is a zero-length span "simba.session.lease_shortened".
//
// # Metrics
//
// Metric names follow the OpenTelemetry conventions: <entity>.<what
// happened> for counters, with the counted thing as a curly-brace unit
// ({session}, {renewal}, {term}), and seconds ("s") for durations.
// Counters: simba.session.opened, simba.session.renewed,
// simba.session.suspended, simba.session.expired,
// simba.session.deadline_passed, simba.session.lease_shortened,
// simba.term.elected and simba.term.revoked (with simba.revoke.reason).
// Histogram: simba.backend.call.duration (seconds) by
// simba.backend.operation and, for failures, error.type, for a backend
// wrapped with [Instrumentation.Backend].
// Gauges: simba.session.renew_period and simba.session.granted (seconds,
// recorded at every grant), and simba.session.remaining (seconds until the
// local deadline, observed at collection for sessions passed to
// [Instrumentation.Observe]).
//
// Cardinality is bounded: session ids, which change with every backend
// session, never become metric attributes, and lease names become one
// (simba.lease.name, on the term counters) only with [WithLeaseNameAttribute],
// for applications whose set of names is small and fixed.
//
// The package depends only on the OpenTelemetry API; the SDK is the
// application's choice.
package otelsimba
