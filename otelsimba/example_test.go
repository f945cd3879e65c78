package otelsimba_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/otelsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func ExampleNew() {
	// In an application: otelsimba.New() uses the global providers your
	// SDK setup registered. Here, an in-memory recorder shows the spans.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp), otelsimba.WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		fmt.Println(err)
		return
	}

	b, _ := memory.New() // in production: a PostgreSQL, MySQL, Redis or ZooKeeper backend
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	elected := make(chan *term.Term, 1)
	e, _ := election.Start(s, "billing-leader", election.WithListener(election.Funcs{
		Elected: func(t *term.Term) { elected <- t },
	}))
	<-elected
	_ = e.Stop(context.Background())
	_ = s.Close()

	for _, sp := range spans.Ended() {
		fmt.Print(sp.Name())
		for _, kv := range sp.Attributes() {
			if kv.Key == "simba.lease.name" || kv.Key == "simba.revoke.reason" {
				fmt.Print(" ", kv.Key, "=", kv.Value.AsString())
			}
		}
		fmt.Println()
	}
	// Output:
	// simba.session.open
	// simba.term.elected simba.lease.name=billing-leader
	// simba.term simba.lease.name=billing-leader simba.revoke.reason=STOPPED
	// simba.session.close
}

func ExampleInstrumentation_Observe() {
	reader := sdkmetric.NewManualReader()
	inst, _ := otelsimba.New(otelsimba.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	defer s.Close()

	// Report the time left until s's local deadline, as simba.session.remaining.
	stop := inst.Observe(s, attribute.String("node", "a"))
	defer stop()
	fmt.Println(s.Remaining() > 0)
	// Output: true
}

func ExampleInstrumentation_Backend() {
	reader := sdkmetric.NewManualReader()
	inst, _ := otelsimba.New(otelsimba.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	b, _ := memory.New()
	// Time every backend call; the wrapper keeps the backend's inspection
	// and release notices.
	s, _ := session.Open(context.Background(), inst.Backend(b), session.WithLogger(nil), inst.Option())
	_ = s.Close()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "simba.backend.call.duration" {
			fmt.Println(m.Name, m.Unit, s.CanInspect())
		}
	}
	// Output: simba.backend.call.duration s true
}
