package otelsimba_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/simba-go/simba/otelsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// The events of one term's life with two renewals: what a listener handles
// per term at the least.
func termEvents() []session.Event {
	now := time.Now()
	return []session.Event{
		{Kind: session.TermElected, Time: now, Session: "s", Name: "billing", Token: 1},
		{Kind: session.SessionRenewed, Time: now, Session: "s", Remaining: 15 * time.Second, RenewEvery: 5 * time.Second},
		{Kind: session.SessionRenewed, Time: now, Session: "s", Remaining: 15 * time.Second, RenewEvery: 5 * time.Second},
		{Kind: session.TermRevoked, Time: now, Session: "s", Name: "billing", Token: 1, Reason: term.Stopped},
	}
}

func benchListener(b *testing.B, l session.Listener) {
	evs := termEvents()
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range evs {
			l(e)
		}
	}
}

// BenchmarkTermEvents compares, per term (elected, two renewals, revoked):
// the baseline of a listener that does nothing, session.LogEvents at its
// default level (the renewals are below it), otelsimba on the no-op global
// providers, and otelsimba on the SDK (a span recorder and a manual reader).
func BenchmarkTermEvents(b *testing.B) {
	b.Run("baseline=noop-listener", func(b *testing.B) { benchListener(b, func(session.Event) {}) })
	b.Run("slog-LogEvents-discard", func(b *testing.B) {
		benchListener(b, session.LogEvents(slog.New(slog.DiscardHandler)))
	})
	b.Run("otelsimba-noop-providers", func(b *testing.B) {
		inst, err := otelsimba.New()
		if err != nil {
			b.Fatal(err)
		}
		benchListener(b, inst.Listener())
	})
	b.Run("otelsimba-sdk", func(b *testing.B) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
		inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp), otelsimba.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		l := inst.Listener()
		evs := termEvents()
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range evs {
				l(e)
			}
			rec.Reset() // keep memory flat: the recorder keeps every span
		}
	})
}
