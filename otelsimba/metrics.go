package otelsimba

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/simba-go/simba/session"
)

// Attribute keys.
const (
	keyLeaseName = attribute.Key("simba.lease.name")
	keyToken     = attribute.Key("simba.term.token")
	keySession   = attribute.Key("simba.session.id")
	keyReason    = attribute.Key("simba.revoke.reason")
	keyGranted   = attribute.Key("simba.session.granted")
	keyRenew     = attribute.Key("simba.session.renew_period")
	keyLeft      = attribute.Key("simba.term.remaining")
	keyError     = attribute.Key("error.message")
	keyDetection = attribute.Key("simba.term.detection_delay")
	keyLinkKind  = attribute.Key("simba.link")
	keyOperation = attribute.Key("simba.backend.operation")
	keyErrorType = attribute.Key("error.type")
)

type instruments struct {
	opens, renewals, suspensions, expirations, deadlines, shortened metric.Int64Counter
	elected, revoked                                                metric.Int64Counter
	renewPeriod, granted                                            metric.Float64Gauge
	remaining                                                       metric.Float64ObservableGauge
	calls                                                           metric.Float64Histogram
}

func (m *instruments) init(meter metric.Meter, observe metric.Float64Callback) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, desc string) metric.Float64Gauge {
		g, err := meter.Float64Gauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	m.opens = counter("simba.session.opened", "{session}", "Backend sessions opened.")
	m.renewals = counter("simba.session.renewed", "{renewal}", "Successful session renewals.")
	m.suspensions = counter("simba.session.suspended", "{suspension}", "Failed renewals or opens that suspended the session.")
	m.expirations = counter("simba.session.expired", "{session}", "Backend sessions the backend reported expired.")
	m.deadlines = counter("simba.session.deadline_passed", "{session}", "Backend sessions whose local deadline passed without a renewal.")
	m.shortened = counter("simba.session.lease_shortened", "{session}", "Backend sessions granted less than two renewal periods.")
	m.elected = counter("simba.term.elected", "{term}", "Terms won.")
	m.revoked = counter("simba.term.revoked", "{term}", "Terms ended, by simba.revoke.reason.")
	m.renewPeriod = gauge("simba.session.renew_period", "The renewal period in force.")
	m.granted = gauge("simba.session.granted", "The time the backend granted at the last open or renewal.")
	var err error
	m.calls, err = meter.Float64Histogram("simba.backend.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the engine's backend calls, by simba.backend.operation (see Instrumentation.Backend)."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	m.remaining, err = meter.Float64ObservableGauge("simba.session.remaining", metric.WithUnit("s"),
		metric.WithDescription("Time left until the session's local deadline (sessions passed to Observe)."),
		metric.WithFloat64Callback(observe))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// record updates the metrics for one event.
func (in *Instrumentation) record(e session.Event) {
	ctx := context.Background()
	m := &in.m
	switch e.Kind {
	case session.SessionOpened:
		m.opens.Add(ctx, 1)
		m.granted.Record(ctx, e.Remaining.Seconds())
		m.renewPeriod.Record(ctx, e.RenewEvery.Seconds())
	case session.SessionRenewed:
		m.renewals.Add(ctx, 1)
		m.granted.Record(ctx, e.Remaining.Seconds())
		m.renewPeriod.Record(ctx, e.RenewEvery.Seconds())
	case session.SessionLeaseShortened:
		m.shortened.Add(ctx, 1)
		m.renewPeriod.Record(ctx, e.RenewEvery.Seconds())
	case session.SessionSuspended:
		m.suspensions.Add(ctx, 1)
	case session.SessionExpired:
		m.expirations.Add(ctx, 1)
	case session.SessionDeadlinePassed:
		m.deadlines.Add(ctx, 1)
	case session.TermElected:
		if in.leaseAttr {
			m.elected.Add(ctx, 1, metric.WithAttributes(keyLeaseName.String(e.Name)))
		} else {
			m.elected.Add(ctx, 1)
		}
	case session.TermRevoked:
		attrs := []attribute.KeyValue{keyReason.String(e.Reason.String())}
		if in.leaseAttr {
			attrs = append(attrs, keyLeaseName.String(e.Name))
		}
		m.revoked.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
}

// observed is a session registered with Observe.
type observed struct {
	s    *session.Session
	opts metric.ObserveOption
}

// Observe reports s's remaining time until its local deadline in the
// simba.session.remaining gauge, read at each collection, until the
// returned stop function is called. attrs distinguish sessions when a
// process observes more than one; session ids are deliberately not used,
// since they change with every backend session.
func (in *Instrumentation) Observe(s *session.Session, attrs ...attribute.KeyValue) (stop func()) {
	o := &observed{s: s, opts: metric.WithAttributes(attrs...)}
	in.mu.Lock()
	in.observed[o] = struct{}{}
	in.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			delete(in.observed, o)
			in.mu.Unlock()
		})
	}
}

func (in *Instrumentation) observe(_ context.Context, obs metric.Float64Observer) error {
	in.mu.Lock()
	list := make([]*observed, 0, len(in.observed))
	for o := range in.observed {
		list = append(list, o)
	}
	in.mu.Unlock()
	// Read outside our lock: Remaining takes the session's own lock.
	for _, o := range list {
		obs.Observe(o.s.Remaining().Seconds(), o.opts)
	}
	return nil
}
