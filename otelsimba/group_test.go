package otelsimba_test

import (
	"context"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/trace"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session/memory"
)

// A member owning 1,024 partitions makes one term span per partition, each
// the root of its own trace and labelled with its group and partition: no
// trace is flooded with a thousand spans.
func TestGroupPartitionTermsAreSmallTraces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1024
		f := newFixture(t)
		b, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := f.open(b, deadline.Config{})
		g, err := group.Join(s, "orders", n)
		if err != nil {
			t.Fatal(err)
		}
		advance(deadline.DefaultLeaseDuration)
		if k := len(g.Terms()); k != n {
			t.Fatalf("owns %d of %d partitions", k, n)
		}
		if err := g.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		traces := map[trace.TraceID]int{}
		partitions := map[int64]bool{}
		for _, sp := range f.spans.Ended() {
			if sp.Name() != "simba.term" {
				continue
			}
			traces[sp.SpanContext().TraceID()]++
			for _, kv := range sp.Attributes() {
				if kv.Key == "simba.group.partition" {
					partitions[kv.Value.AsInt64()] = true
				}
			}
		}
		if len(partitions) != n {
			t.Fatalf("%d partitions labelled on term spans, want %d", len(partitions), n)
		}
		for id, k := range traces {
			if k > 1 {
				t.Fatalf("trace %s holds %d term spans, want one per trace", id, k)
			}
		}
	})
}
