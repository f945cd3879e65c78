// Package otelsimba turns the events of a Simba session into OpenTelemetry
// traces and metrics.
//
// Create an [Instrumentation] with [New] and pass its listener to the
// session:
//
//	inst, err := otelsimba.New() // the global TracerProvider and MeterProvider
//	s, err := session.Open(ctx, backend, inst.Option())
//	stop := inst.Observe(s) // optional: the simba.session.remaining gauge
//
// # Traces
//
// One span per term, named "simba.term", started when the term is elected
// (TermElected) and ended when it is revoked (TermRevoked), both at the time
// the engine saw the event. Its attributes are simba.lease.name,
// simba.term.token and simba.session.id, and simba.revoke.reason once it
// ends. A term that ends involuntarily (DEADLINE_PASSED, SESSION_EXPIRED,
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
// Counters: simba.session.opens, simba.session.renewals,
// simba.session.suspensions, simba.session.expirations,
// simba.session.deadline_passes, simba.session.lease_shortened,
// simba.term.elected and simba.term.revoked (with simba.revoke.reason).
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
