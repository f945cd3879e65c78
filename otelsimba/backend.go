package otelsimba

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// Backend wraps b so that every call the engine makes is timed in the
// simba.backend.call.duration histogram (seconds), by
// simba.backend.operation (open, renew, acquire, release, close, inspect)
// and, for failed calls, error.type (expired, closed, timeout, or _OTHER).
// The wrapper keeps b's optional capabilities (driver.Inspector,
// driver.Broadcaster): it implements exactly those b implements.
func (in *Instrumentation) Backend(b session.Backend) session.Backend {
	t := &timed{b: b, h: in.m.calls}
	insp, canInspect := b.(driver.Inspector)
	bc, canBroadcast := b.(driver.Broadcaster)
	switch {
	case canInspect && canBroadcast:
		return struct {
			*timed
			timedInspector
			driver.Broadcaster
		}{t, timedInspector{t, insp}, bc}
	case canInspect:
		return struct {
			*timed
			timedInspector
		}{t, timedInspector{t, insp}}
	case canBroadcast:
		return struct {
			*timed
			driver.Broadcaster
		}{t, bc}
	}
	return t
}

type timed struct {
	b session.Backend
	h metric.Float64Histogram
}

func (t *timed) record(ctx context.Context, op string, start time.Time, err error) {
	attrs := []attribute.KeyValue{keyOperation.String(op)}
	if err != nil {
		attrs = append(attrs, keyErrorType.String(errorType(err)))
	}
	t.h.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
}

// errorType names a failure with a small, fixed set of values (bounded
// cardinality).
func errorType(err error) string {
	switch {
	case errors.Is(err, session.ErrExpired):
		return "expired"
	case errors.Is(err, session.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	}
	return "_OTHER"
}

func (t *timed) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	start := time.Now()
	r, err := t.b.Open(ctx, req)
	t.record(ctx, "open", start, err)
	return r, err
}

func (t *timed) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	start := time.Now()
	r, err := t.b.Renew(ctx, req)
	t.record(ctx, "renew", start, err)
	return r, err
}

func (t *timed) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	start := time.Now()
	r, err := t.b.Acquire(ctx, req)
	t.record(ctx, "acquire", start, err)
	return r, err
}

func (t *timed) Release(ctx context.Context, req driver.ReleaseRequest) error {
	start := time.Now()
	err := t.b.Release(ctx, req)
	t.record(ctx, "release", start, err)
	return err
}

func (t *timed) Close(ctx context.Context, id session.ID) error {
	start := time.Now()
	err := t.b.Close(ctx, id)
	t.record(ctx, "close", start, err)
	return err
}

type timedInspector struct {
	t *timed
	i driver.Inspector
}

func (ti timedInspector) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	start := time.Now()
	hs, err := ti.i.Inspect(ctx, req)
	ti.t.record(ctx, "inspect", start, err)
	return hs, err
}
