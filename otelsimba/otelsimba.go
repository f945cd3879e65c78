package otelsimba

import (
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/simba-go/simba/session"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/simba-go/simba/otelsimba"

// Version is the instrumentation scope's version: the module's release
// (versions.yaml).
const Version = "0.1.0"

// ErrInvalidOption is wrapped by the error [New] returns for an invalid
// option.
var ErrInvalidOption = errors.New("otelsimba: invalid option")

// An Option configures an [Instrumentation].
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	leaseAttr bool
	errs      []error
}

// WithTracerProvider records spans through tp instead of the global
// TracerProvider. A nil tp is an error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithTracerProvider(nil)", ErrInvalidOption))
		}
		c.tp = tp
	}
}

// WithMeterProvider records metrics through mp instead of the global
// MeterProvider. A nil mp is an error.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithMeterProvider(nil)", ErrInvalidOption))
		}
		c.mp = mp
	}
}

// WithLeaseNameAttribute adds simba.lease.name to the term counters. Every
// distinct name then makes its own time series: use it only when the
// application's lease names are few and fixed (not, say, one per
// customer).
func WithLeaseNameAttribute() Option { return func(c *config) { c.leaseAttr = true } }

// Instrumentation turns session events into spans and metrics. One value
// may serve several sessions; it is safe for concurrent use.
type Instrumentation struct {
	tracer    trace.Tracer
	tp        trace.TracerProvider
	leaseAttr bool
	m         instruments

	mu       sync.Mutex
	terms    map[termKey]openTerm         // terms started and not yet ended
	pending  map[termKey]*pendingSpan     // terms begun whose elected span the listener has not recorded yet
	last     map[string]trace.SpanContext // the last term span per name, for links
	observed map[*observed]struct{}
}

// termKey identifies a term across the sessions an Instrumentation serves:
// a token is unique per name, and a term belongs to one backend session.
type termKey struct {
	session session.ID
	name    string
	token   uint64
}

// New returns an Instrumentation. Without options it uses the global
// TracerProvider and MeterProvider (otel.GetTracerProvider,
// otel.GetMeterProvider), read once, here. It fails, wrapping
// [ErrInvalidOption], for an invalid option, or if an instrument cannot be
// created.
func New(opts ...Option) (*Instrumentation, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	in := &Instrumentation{
		tracer:    c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		tp:        c.tp,
		leaseAttr: c.leaseAttr,
		terms:     make(map[termKey]openTerm),
		pending:   make(map[termKey]*pendingSpan),
		last:      make(map[string]trace.SpanContext),
		observed:  make(map[*observed]struct{}),
	}
	if err := in.m.init(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version)), in.observe); err != nil {
		return nil, fmt.Errorf("otelsimba: create instruments: %w", err)
	}
	return in, nil
}

// Listener returns the session.Listener that records events: pass it to
// session.WithListener (or use [Instrumentation.Option]).
func (in *Instrumentation) Listener() session.Listener { return in.handle }

// Option returns the session option that instruments a session: its
// listener (session.WithListener) and the term-context decorator
// (session.WithTermContext) that puts each term's span in the term's
// context, so leader work nests under it.
func (in *Instrumentation) Option() session.Option {
	return both(session.WithListener(in.Listener()), session.WithTermContext(in.termContext))
}

// both combines two options of one function type. session.Option's
// parameter type is unexported; inference names it for us.
func both[O ~func(P), P any](a, b O) O { return func(p P) { a(p); b(p) } }

// handle records one event. The engine calls listeners in the order events
// happen, so a term's TermElected always comes before its TermRevoked.
func (in *Instrumentation) handle(e session.Event) {
	in.record(e)
	in.trace(e)
}
