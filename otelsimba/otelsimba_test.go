package otelsimba_test

import (
	"context"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/otelsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChild) != "" {
		crashChildMain() // the process TestKilledLeaderLeavesNoOrphanSpans kills
	}
	goleak.VerifyTestMain(m)
}

// Tests run in a synctest bubble: the engine's real code path on virtual
// time (see session/session_test.go).

// advance lets d of virtual time pass and waits until the engine is idle.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// fixture is an Instrumentation recording into an in-memory SDK.
type fixture struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	inst   *otelsimba.Instrumentation
}

func newFixture(t *testing.T, opts ...otelsimba.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	inst, err := otelsimba.New(append([]otelsimba.Option{otelsimba.WithTracerProvider(tp), otelsimba.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.inst = inst
	return f
}

// open opens an instrumented session on b.
func (f *fixture) open(b *memory.Backend, cfg deadline.Config) *session.Session {
	f.t.Helper()
	s, err := session.Open(context.Background(), b, session.WithConfig(cfg), session.WithLogger(nil), f.inst.Option())
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	synctest.Wait() // events are delivered after Open returns
	f.t.Cleanup(func() { _ = s.Close() })
	return s
}

// lead starts an election on s and waits until it leads.
func (f *fixture) lead(s *session.Session, name string) *election.Election {
	f.t.Helper()
	e, err := election.Start(s, name)
	if err != nil {
		f.t.Fatalf("Start(%q): %v", name, err)
	}
	synctest.Wait()
	if e.Status() != election.Leader {
		f.t.Fatalf("Status() = %v, want LEADER", e.Status())
	}
	f.t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

// ended returns the ended spans named name.
func (f *fixture) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// living counts the terms begun and not ended: simba.term.elected spans
// that no simba.term span has for parent yet.
func (f *fixture) living() int {
	ended := map[trace.SpanID]bool{}
	for _, s := range f.ended("simba.term") {
		ended[s.Parent().SpanID()] = true
	}
	n := 0
	for _, s := range f.ended("simba.term.elected") {
		if !ended[s.SpanContext().SpanID()] {
			n++
		}
	}
	return n
}

// sessionEvents are the simba.session.* spans recorded under the term whose
// simba.term span is sp (children of its elected span), in time order.
func (f *fixture) sessionEvents(sp sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.Parent().SpanID() == sp.Parent().SpanID() && strings.HasPrefix(s.Name(), "simba.session.") {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartTime().Before(out[j].StartTime()) })
	return out
}

func (f *fixture) collect() metricdata.ResourceMetrics {
	f.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		f.t.Fatalf("Collect: %v", err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// count sums the counter name over the data points that carry every one of
// attrs (0 if never recorded).
func (f *fixture) count(name string, attrs ...attribute.KeyValue) int64 {
	f.t.Helper()
	m, ok := find(f.collect(), name)
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		f.t.Fatalf("%s is %T, want a Sum[int64]", name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if hasAll(dp.Attributes, attrs) {
			n += dp.Value
		}
	}
	return n
}

// gauge returns the value of a float gauge with no attributes.
func (f *fixture) gauge(name string) (float64, bool) {
	f.t.Helper()
	m, ok := find(f.collect(), name)
	if !ok {
		return 0, false
	}
	g, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		f.t.Fatalf("%s is %T, want a Gauge[float64]", name, m.Data)
	}
	if len(g.DataPoints) != 1 {
		f.t.Fatalf("%s has %d data points, want 1", name, len(g.DataPoints))
	}
	return g.DataPoints[0].Value, true
}

func hasAll(set attribute.Set, attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func reason(r term.RevokeReason) attribute.KeyValue {
	return attribute.String("simba.revoke.reason", r.String())
}

func TestTermLostToSessionExpiredEndsOneSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		e := f.lead(s, "billing")
		first := e.Term()
		oldID := s.ID()
		if got := f.living(); got != 1 {
			t.Fatalf("open term spans = %d, want 1", got)
		}

		advance(2 * time.Second)
		b.Expire(oldID)
		advance(time.Second) // the notice's renewal hears ErrExpired at once (ADR 0228)
		if first.Valid() {
			t.Fatal("first term still valid after the backend expired its session")
		}
		if e.Status() != election.Leader || e.Term() == first {
			t.Fatalf("after expiry: status %v, term %v; want LEADER of a new term", e.Status(), e.Term())
		}

		ended := f.ended("simba.term")
		if len(ended) != 1 {
			t.Fatalf("ended term spans = %d, want 1", len(ended))
		}
		sp := ended[0]
		if v, _ := attr(sp, "simba.revoke.reason"); v.AsString() != "SESSION_EXPIRED" {
			t.Fatalf("simba.revoke.reason = %q, want SESSION_EXPIRED", v.AsString())
		}
		if v, _ := attr(sp, "simba.lease.name"); v.AsString() != "billing" {
			t.Fatalf("simba.lease.name = %q, want billing", v.AsString())
		}
		if v, _ := attr(sp, "simba.term.token"); v.AsString() != strconv.FormatUint(first.Token(), 10) {
			t.Fatalf("simba.term.token = %q, want %d", v.AsString(), first.Token())
		}
		if v, _ := attr(sp, "simba.session.id"); v.AsString() != string(oldID) {
			t.Fatalf("simba.session.id = %q, want %q", v.AsString(), oldID)
		}
		if sp.Status().Code != codes.Error || sp.Status().Description != "SESSION_EXPIRED" {
			t.Fatalf("status = %+v, want Error SESSION_EXPIRED", sp.Status())
		}
		if got := names(f.sessionEvents(sp)); len(got) != 1 || got[0] != "simba.session.expired" {
			t.Fatalf("session spans under the term = %v, want [simba.session.expired]", got)
		}
		// Elected at open, ended 2s later by the renewal the notice sent.
		if got := sp.EndTime().Sub(sp.StartTime()); got != 2*time.Second {
			t.Fatalf("term span lasted %v, want 2s", got)
		}
		if got := f.living(); got != 1 {
			t.Fatalf("open term spans after re-election = %d, want 1 (the new term)", got)
		}

		if got := f.count("simba.session.expired"); got != 1 {
			t.Fatalf("simba.session.expired = %d, want 1", got)
		}
		if got := f.count("simba.term.revoked", reason(term.SessionExpired)); got != 1 {
			t.Fatalf("simba.term.revoked{SESSION_EXPIRED} = %d, want 1", got)
		}
		if got := f.count("simba.term.elected"); got != 2 {
			t.Fatalf("simba.term.elected = %d, want 2", got)
		}
		if got := f.count("simba.session.opened"); got != 2 {
			t.Fatalf("simba.session.opened = %d, want 2", got)
		}
		if got := len(f.ended("simba.session.open")); got != 2 {
			t.Fatalf("simba.session.open spans = %d, want 2", got)
		}

		// Stopping ends the new term's span, voluntarily: no error status.
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		ended = f.ended("simba.term")
		if len(ended) != 2 {
			t.Fatalf("ended term spans after Stop = %d, want 2", len(ended))
		}
		if v, _ := attr(ended[1], "simba.revoke.reason"); v.AsString() != "STOPPED" {
			t.Fatalf("second span's reason = %q, want STOPPED", v.AsString())
		}
		if ended[1].Status().Code != codes.Unset {
			t.Fatalf("voluntary end's status = %+v, want Unset", ended[1].Status())
		}
		if got := f.count("simba.term.revoked", reason(term.Stopped)); got != 1 {
			t.Fatalf("simba.term.revoked{STOPPED} = %d, want 1", got)
		}
	})
}

func TestTermLostToDeadlineCarriesSuspensionEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		e := f.lead(s, "indexer")
		tm := e.Term()
		b.FailCalls(errors.New("connection refused"))
		advance(5 * time.Second) // first failed renewal: suspended
		if got := f.count("simba.session.suspended"); got != 1 {
			t.Fatalf("simba.session.suspended = %d, want 1", got)
		}
		if got := f.living(); got != 1 {
			t.Fatalf("open term spans while suspended = %d, want 1", got)
		}
		// The deadline is 14.8s after the last renewal was sent (t=0).
		advance(9800 * time.Millisecond)
		if tm.Valid() {
			t.Fatal("term still valid after the local deadline")
		}
		b.FailCalls(nil)
		ended := f.ended("simba.term")
		if len(ended) != 1 {
			t.Fatalf("ended term spans = %d, want 1", len(ended))
		}
		sp := ended[0]
		if v, _ := attr(sp, "simba.revoke.reason"); v.AsString() != "DEADLINE_PASSED" {
			t.Fatalf("simba.revoke.reason = %q, want DEADLINE_PASSED", v.AsString())
		}
		evs := f.sessionEvents(sp)
		if got := names(evs); len(got) != 2 || got[0] != "simba.session.suspended" || got[1] != "simba.session.deadline_passed" {
			t.Fatalf("session spans under the term = %v, want [simba.session.suspended simba.session.deadline_passed]", got)
		}
		var msg string
		for _, kv := range evs[0].Attributes() {
			if kv.Key == "error.message" {
				msg = kv.Value.AsString()
			}
		}
		if msg == "" {
			t.Fatal("simba.session.suspended has no error.message")
		}
		if got := sp.EndTime().Sub(sp.StartTime()); got != 14800*time.Millisecond {
			t.Fatalf("term span lasted %v, want 14.8s (the local deadline)", got)
		}
		if got := f.count("simba.session.deadline_passed"); got != 1 {
			t.Fatalf("simba.session.deadline_passed = %d, want 1", got)
		}
		if got := f.count("simba.term.revoked", reason(term.DeadlinePassed)); got != 1 {
			t.Fatalf("simba.term.revoked{DEADLINE_PASSED} = %d, want 1", got)
		}
		if got := f.count("simba.session.expired"); got != 0 {
			t.Fatalf("simba.session.expired = %d, want 0", got)
		}
	})
}

func TestRenewalsAndGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		if _, ok := f.gauge("simba.session.remaining"); ok {
			t.Fatal("simba.session.remaining reported before Observe")
		}
		stop := f.inst.Observe(s)
		if got, _ := f.gauge("simba.session.remaining"); got != 14.8 {
			t.Fatalf("simba.session.remaining = %v, want 14.8 (15s × 0.99 − 50ms)", got)
		}
		advance(10*time.Second + time.Millisecond) // two renewals, at 5s and 10s
		if got := f.count("simba.session.renewed"); got != 2 {
			t.Fatalf("simba.session.renewed = %d, want 2", got)
		}
		if got, _ := f.gauge("simba.session.renew_period"); got != 5 {
			t.Fatalf("simba.session.renew_period = %v, want 5", got)
		}
		if got, _ := f.gauge("simba.session.granted"); got != 15 {
			t.Fatalf("simba.session.granted = %v, want 15", got)
		}
		if got, _ := f.gauge("simba.session.remaining"); got != 14.799 {
			t.Fatalf("simba.session.remaining = %v, want 14.799 (1ms after the renewal at 10s)", got)
		}
		stop()
		stop() // idempotent
		if _, ok := f.gauge("simba.session.remaining"); ok {
			t.Fatal("simba.session.remaining still reported after stop")
		}
	})
}

func TestLeaseShortened(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		// Like a ZooKeeper server whose maxSessionTimeout is 6s: validity
		// 6 × 0.99 − 0.05 = 5.89s, renew every 5.89/3 ≈ 1.963s.
		b, err := memory.New(memory.WithMaxLease(6 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		f.lead(s, "zk-like")
		advance(10 * time.Second)
		if got := f.count("simba.session.lease_shortened"); got != 1 {
			t.Fatalf("simba.session.lease_shortened = %d, want 1 (once per session)", got)
		}
		spans := f.ended("simba.session.lease_shortened")
		if len(spans) != 1 {
			t.Fatalf("simba.session.lease_shortened spans = %d, want 1", len(spans))
		}
		if v, _ := attr(spans[0], "simba.session.granted"); v.AsFloat64() != 6 {
			t.Fatalf("simba.session.granted = %v, want 6", v.AsFloat64())
		}
		want := s.Config().Validity(6*time.Second) / 3
		if got, _ := f.gauge("simba.session.renew_period"); got != want.Seconds() {
			t.Fatalf("simba.session.renew_period = %v, want %v", got, want.Seconds())
		}
		if got := f.count("simba.session.renewed"); got != int64(10*time.Second/want) {
			t.Fatalf("simba.session.renewed in 10s = %d, want %d", got, int64(10*time.Second/want))
		}
	})
}

func TestStepDownIsVoluntary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, otelsimba.WithLeaseNameAttribute())
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		e := f.lead(s, "deploy")
		if err := e.StepDown(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		ended := f.ended("simba.term")
		if len(ended) != 1 {
			t.Fatalf("ended term spans = %d, want 1", len(ended))
		}
		if v, _ := attr(ended[0], "simba.revoke.reason"); v.AsString() != "STEPPED_DOWN" {
			t.Fatalf("simba.revoke.reason = %q, want STEPPED_DOWN", v.AsString())
		}
		if ended[0].Status().Code != codes.Unset {
			t.Fatalf("status = %+v, want Unset", ended[0].Status())
		}
		name := attribute.String("simba.lease.name", "deploy")
		if got := f.count("simba.term.revoked", reason(term.SteppedDown), name); got != 1 {
			t.Fatalf("simba.term.revoked{STEPPED_DOWN, deploy} = %d, want 1", got)
		}
		if got := f.count("simba.term.elected", name); got != 1 {
			t.Fatalf("simba.term.elected{deploy} = %d, want 1", got)
		}
	})
}

func TestNoLeaseNameOnMetricsByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		for _, n := range []string{"a", "b", "c"} {
			f.lead(s, n)
		}
		m, ok := find(f.collect(), "simba.term.elected")
		if !ok {
			t.Fatal("simba.term.elected not recorded")
		}
		dps := m.Data.(metricdata.Sum[int64]).DataPoints
		if len(dps) != 1 || dps[0].Value != 3 || dps[0].Attributes.Len() != 0 {
			t.Fatalf("simba.term.elected data points = %+v, want one series of 3 with no attributes", dps)
		}
	})
}

// Several sessions (nodes) share one Instrumentation and fail over to each
// other: every term span ends once, with the reason the counters report.
func TestSharedAcrossSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		clients := []*memory.Backend{b, b.NewClient(), b.NewClient()}
		var sessions []*session.Session
		for _, c := range clients {
			s := f.open(c, deadline.Config{})
			if _, err := election.Start(s, "leader"); err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, s)
		}
		synctest.Wait()
		for range 4 {
			id, _, ok := b.Owner("leader")
			if !ok {
				t.Fatal("nobody leads")
			}
			b.Expire(id)
			advance(20 * time.Second) // the owner hears it; a candidate takes over
		}
		for _, s := range sessions {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if got := f.living(); got != 0 {
			t.Fatalf("term spans still open after every session closed = %d", got)
		}
		ended := f.ended("simba.term")
		elected := f.count("simba.term.elected")
		if int64(len(ended)) != elected || elected < 5 {
			t.Fatalf("ended term spans = %d, terms elected = %d; want equal and at least 5", len(ended), elected)
		}
		byReason := map[string]int64{}
		for _, sp := range ended {
			v, _ := attr(sp, "simba.revoke.reason")
			byReason[v.AsString()]++
		}
		for _, r := range []term.RevokeReason{term.SessionExpired, term.Stopped} {
			if got := f.count("simba.term.revoked", reason(r)); got != byReason[r.String()] {
				t.Fatalf("simba.term.revoked{%v} = %d, spans with that reason = %d", r, got, byReason[r.String()])
			}
		}
		if byReason["SESSION_EXPIRED"] != 4 {
			t.Fatalf("spans ended by SESSION_EXPIRED = %d, want 4", byReason["SESSION_EXPIRED"])
		}
	})
}

func TestInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  otelsimba.Option
	}{
		{"nil tracer provider", otelsimba.WithTracerProvider(nil)},
		{"nil meter provider", otelsimba.WithMeterProvider(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := otelsimba.New(tc.opt)
			if !errors.Is(err, otelsimba.ErrInvalidOption) {
				t.Fatalf("New: err = %v, want ErrInvalidOption", err)
			}
		})
	}
}

func TestDefaultsToGlobals(t *testing.T) {
	// The globals are read once, by New: swap them for the test, then back.
	oldTP, oldMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	rec, reader := tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	inst, err := otelsimba.New()
	otel.SetTracerProvider(oldTP)
	otel.SetMeterProvider(oldMP)
	if err != nil {
		t.Fatalf("New(): %v", err)
	}
	l := inst.Listener()
	l(session.Event{Kind: session.TermElected, Session: "x", Name: "n", Token: 1})
	l(session.Event{Kind: session.TermRevoked, Session: "x", Name: "n", Token: 1, Reason: term.TakenOver})
	if got := len(rec.Ended()); got != 2 {
		t.Fatalf("spans through the global TracerProvider = %d, want 2 (simba.term.elected, simba.term)", got)
	}
	f := &fixture{t: t, reader: reader}
	if got := f.count("simba.term.revoked", reason(term.TakenOver)); got != 1 {
		t.Fatalf("simba.term.revoked through the global MeterProvider = %d, want 1", got)
	}
}

// A TermRevoked for a term elected before the Instrumentation listened only
// counts; a TAKEN_OVER term is an error span.
func TestRevokedWithoutElectedAndTakenOver(t *testing.T) {
	f := newFixture(t)
	l := f.inst.Listener()
	now := time.Now()
	l(session.Event{Kind: session.TermRevoked, Time: now, Session: "s1", Name: "n", Token: 7, Reason: term.TakenOver})
	if got := len(f.spans.Ended()); got != 0 {
		t.Fatalf("spans = %d, want 0 for an unknown term", got)
	}
	l(session.Event{Kind: session.TermElected, Time: now, Session: "s1", Name: "n", Token: 8})
	l(session.Event{Kind: session.SessionSuspended, Time: now, Session: "s2", Err: errors.New("other session")})
	l(session.Event{Kind: session.TermRevoked, Time: now.Add(time.Second), Session: "s1", Name: "n", Token: 8, Reason: term.TakenOver})
	ended := f.ended("simba.term")
	if len(ended) != 1 || ended[0].Status().Code != codes.Error || ended[0].Status().Description != "TAKEN_OVER" {
		t.Fatalf("ended = %v, want one Error span TAKEN_OVER", ended)
	}
	if n := len(f.sessionEvents(ended[0])); n != 0 {
		t.Fatalf("session spans under the term = %d, want 0 (the suspension was another session's)", n)
	}
	if got := f.count("simba.term.revoked", reason(term.TakenOver)); got != 2 {
		t.Fatalf("simba.term.revoked{TAKEN_OVER} = %d, want 2", got)
	}
}
