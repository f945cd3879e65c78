package otelsimba_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/otelsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// orphans reports every span of spans whose parent is not among them.
func orphans(spans []sdktrace.ReadOnlySpan) []string {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var out []string
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && !ids[p.SpanID()] {
			out = append(out, fmt.Sprintf("%s (parent %s)", s.Name(), p.SpanID()))
		}
	}
	return out
}

// While a term lives, what has been exported reads as a trace: the term's
// elected span is there, every app span and session event under it has
// its parent exported (issue 22, item 12: the term span used to be
// exported only when the term ended, leaving app spans without a parent).
func TestLivingTermExportsParentsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		app := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans)).Tracer("app")
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		e, err := election.Start(s, "ticker", election.Every(time.Second, func(ctx context.Context, _ *term.Term) error {
			_, sp := app.Start(ctx, "app.tick")
			sp.End()
			return nil
		}, nil))
		if err != nil {
			t.Fatal(err)
		}
		advance(3500 * time.Millisecond)
		b.FailCalls(fmt.Errorf("connection refused"))
		advance(2 * time.Second) // a failed renewal: suspended, the term still valid
		b.FailCalls(nil)
		advance(time.Second)
		if e.Status() != election.Leader {
			t.Fatalf("status %v, want LEADER for the whole test", e.Status())
		}
		living := f.spans.Ended()
		if n := len(f.ended("app.tick")); n < 3 {
			t.Fatalf("app.tick spans = %d, want the task's runs", n)
		}
		if n := len(f.ended("simba.term.elected")); n != 1 {
			t.Fatalf("simba.term.elected spans while the term lives = %d, want 1", n)
		}
		if n := len(f.ended("simba.session.suspended")); n != 1 {
			t.Fatalf("simba.session.suspended spans while the term lives = %d, want 1 (exported at once)", n)
		}
		if n := len(f.ended("simba.term")); n != 0 {
			t.Fatalf("simba.term spans while the term lives = %d, want 0", n)
		}
		if o := orphans(living); len(o) > 0 {
			t.Fatalf("exported while the term lives, without an exported parent: %v", o)
		}
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(f.ended("simba.term")); n != 1 {
			t.Fatalf("simba.term spans after the term = %d, want 1", n)
		}
		if o := orphans(f.spans.Ended()); len(o) > 0 {
			t.Fatalf("exported without an exported parent: %v", o)
		}
	})
}

// lineExporter writes "span parent name" per span to a file, as the span
// ends (with a simple processor): what a collector would have received
// from a process at the moment it is killed.
type lineExporter struct {
	mu sync.Mutex
	w  *os.File
}

func (x *lineExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, s := range spans {
		parent := "-"
		if s.Parent().IsValid() {
			parent = s.Parent().SpanID().String()
		}
		if _, err := fmt.Fprintf(x.w, "%s %s %s\n", s.SpanContext().SpanID(), parent, s.Name()); err != nil {
			return err
		}
	}
	return nil
}

func (x *lineExporter) Shutdown(context.Context) error { return nil }

const crashChild = "OTELSIMBA_CRASH_CHILD"

// crashChildMain is the process the kill test kills: a leader whose task
// traces a tick every 10ms, exporting each span as it ends to stdout. It
// never returns.
func crashChildMain() {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(&lineExporter{w: os.Stdout}))
	inst, err := otelsimba.New(otelsimba.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	b, err := memory.New()
	if err != nil {
		panic(err)
	}
	s, err := session.Open(context.Background(), b, session.WithLogger(nil), inst.Option())
	if err != nil {
		panic(err)
	}
	app := tp.Tracer("app")
	_, err = election.Start(s, "ticker", election.Every(10*time.Millisecond, func(ctx context.Context, _ *term.Term) error {
		_, sp := app.Start(ctx, "app.tick")
		sp.End()
		return nil
	}, nil))
	if err != nil {
		panic(err)
	}
	select {}
}

// A leader killed with SIGKILL mid-term leaves a readable trace: every
// span it exported has its parent exported too (the 23 app.tick spans of
// the issue had none, their term span never ended).
func TestKilledLeaderLeavesNoOrphanSpans(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledLeaderLeavesNoOrphanSpans$")
	cmd.Env = append(os.Environ(), crashChild+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() }) // a bound on a hang
	defer timer.Stop()
	var lines []string
	ticks := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.HasSuffix(line, " app.tick") {
			ticks++
		}
		if ticks == 20 {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			break
		}
	}
	go func() { _ = cmd.Wait(); close(done) }()
	for sc.Scan() { // whatever was written before the kill
		lines = append(lines, sc.Text())
	}
	<-done
	if ticks < 20 {
		t.Fatalf("the child exported %d app.tick spans before it ended, want 20:\n%s", ticks, strings.Join(lines, "\n"))
	}
	ids := map[string]bool{}
	byName := map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		ids[f[0]] = true
		byName[f[2]]++
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if f[1] != "-" && !ids[f[1]] {
			t.Errorf("exported span %s (%s) has a parent %s that was never exported", f[2], f[0], f[1])
		}
	}
	if byName["simba.term.elected"] != 1 || byName["simba.term"] != 0 {
		t.Fatalf("exported spans by name = %v, want one simba.term.elected and no simba.term (the term never ended)", byName)
	}
}
