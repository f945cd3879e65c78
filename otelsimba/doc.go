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
// One span per term, named "simba.term", started when the term is elected
// and put into the term's context (through session.WithTermContext, which
// [Instrumentation.Option] installs), so spans that leader work starts from
// the term's context nest under it. Because a span is exported only when it
// ends, a zero-length child "simba.term.elected" is recorded as the term
// begins: a term shows while it lives, and a leader killed mid-term still
// left a trace. The term span is linked to the previous term of the same
// name this Instrumentation saw (link attribute simba.link=previous_term).
// It ends at the earlier of the moment the engine noticed the end and the
// session's local deadline (a frozen process notices late, but its term was
// over at the deadline), with simba.term.detection_delay (seconds between
// the two). Its attributes are simba.lease.name, simba.term.token and
// simba.session.id, and simba.revoke.reason once it ends. A term that ends involuntarily (DEADLINE_PASSED, SESSION_EXPIRED,
// TAKEN_OVER) gets an Error status with the reason as description; a
// voluntary end (STOPPED, STEPPED_DOWN) leaves the status unset.
//
// What happens to the session while a term is open is added as span events
// on every open term span of that session: simba.session.suspended (with
// the error), simba.session.lease_shortened (granted time and new renewal
// period), simba.session.expired and simba.session.deadline_passed.
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
