package faultcheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/integration/faultcheck"
)

const s = int64(time.Second)

// clean is a correct history: w1 leads with token 10 until its window
// ends at 3s, w2 is elected with 11 and acts from 4s; a fault at 2.5s.
func clean() []faultcheck.Event {
	return []faultcheck.Event{
		{Kind: faultcheck.Start, Worker: "w1", T: 0},
		{Kind: faultcheck.Elected, Worker: "w1", T: 1 * s, Token: 10},
		{Kind: faultcheck.Act, Worker: "w1", T: 1 * s, Token: 10, Until: 3 * s},
		{Kind: faultcheck.Fault, Worker: "w1", T: 2*s + s/2, Reason: "pause-long"},
		{Kind: faultcheck.Revoked, Worker: "w1", T: 3 * s, Token: 10, Reason: "DEADLINE_PASSED"},
		{Kind: faultcheck.Elected, Worker: "w2", T: 4 * s, Token: 11},
		{Kind: faultcheck.Act, Worker: "w2", T: 4 * s, Token: 11, Until: 6 * s},
		{Kind: faultcheck.Revoked, Worker: "w2", T: 5 * s, Token: 11},
		{Kind: faultcheck.Exit, Worker: "w2", T: 5 * s},
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	r := faultcheck.Check(clean())
	if len(r.Violations) != 0 {
		t.Fatal(r.Violations)
	}
	if r.Acts != 2 || r.Elections != 2 || r.Faults["pause-long"] != 1 {
		t.Fatalf("counts: %+v", r)
	}
	if len(r.Failovers) != 1 || r.Failovers[0].Kept || r.Failovers[0].D != 3*time.Second/2 {
		t.Fatalf("failover: %+v", r.Failovers)
	}
}

// Each planted bug must be reported by the rule it breaks.
func TestPlantedBugsAreCaught(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func([]faultcheck.Event) []faultcheck.Event
		want  string
	}{
		{"act inside an older window", func(es []faultcheck.Event) []faultcheck.Event {
			es[2].Until = 4*s + 1 // w1 believed itself valid past w2's first act
			return es
		}, "believed-valid window"},
		{"act after revocation", func(es []faultcheck.Event) []faultcheck.Event {
			return append(es, faultcheck.Event{Kind: faultcheck.Act, Worker: "w1", T: 3*s + 1, Token: 10, Until: 3*s + 2})
		}, "outside its term"},
		{"token going back", func(es []faultcheck.Event) []faultcheck.Event {
			es[5].Token, es[6].Token, es[7].Token = 9, 9, 9
			return es
		}, "token went from 10 to 9"},
		{"elected twice", func(es []faultcheck.Event) []faultcheck.Event {
			return append(es[:4:4], faultcheck.Event{Kind: faultcheck.Elected, Worker: "w1", T: 2*s + s/2 + 1, Token: 12})
		}, "still open"},
		{"exit without OnRevoked", func(es []faultcheck.Event) []faultcheck.Event {
			es[7].Kind = faultcheck.Start // drop w2's revoked
			return es
		}, "no OnRevoked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := faultcheck.Check(tc.plant(clean()))
			for _, v := range r.Violations {
				if strings.Contains(v, tc.want) {
					return
				}
			}
			t.Fatalf("want a violation containing %q, got %q", tc.want, r.Violations)
		})
	}
}

func TestKilledRunMayEndOpen(t *testing.T) {
	es := clean()[:3]
	es = append(es, faultcheck.Event{Kind: faultcheck.Exit, Worker: "w1", T: 2 * s, Killed: true})
	if r := faultcheck.Check(es); len(r.Violations) != 0 {
		t.Fatal(r.Violations)
	}
}

func TestReadSkipsTornLastLine(t *testing.T) {
	es, err := faultcheck.Read(strings.NewReader("{\"k\":\"start\",\"w\":\"w1\",\"t\":1}\n{\"k\":\"act\",\"w\""))
	if err != nil || len(es) != 1 {
		t.Fatalf("Read = %v, %v", es, err)
	}
	if _, err := faultcheck.Read(strings.NewReader("garbage\n{\"k\":\"start\",\"w\":\"w1\",\"t\":1}\n")); err == nil {
		t.Fatal("a bad line in the middle must be an error")
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte("{\"k\":\"act\",\"w\":\"w1\",\"t\":1,\"tok\":2,\"u\":3}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := faultcheck.Read(strings.NewReader(string(b)))
		if err == nil {
			_ = faultcheck.Check(es) // never panics
		}
	})
}

// A group's partitions are checked lease by lease: two workers owning two
// partitions at once is no violation; two valid owners of one partition,
// or its tokens going back, are.
func TestPartitionsAreCheckedLeaseByLease(t *testing.T) {
	ok := []faultcheck.Event{
		{Kind: faultcheck.Start, Worker: "w1", T: 0},
		{Kind: faultcheck.Start, Worker: "w2", T: 0},
		{Kind: faultcheck.Elected, Worker: "w1", T: 1 * s, Token: 5, Lease: "g:p:0"},
		{Kind: faultcheck.Elected, Worker: "w2", T: 1 * s, Token: 3, Lease: "g:p:1"},
		{Kind: faultcheck.Act, Worker: "w1", T: 1 * s, Token: 5, Until: 3 * s, Lease: "g:p:0"},
		{Kind: faultcheck.Act, Worker: "w2", T: 1 * s, Token: 3, Until: 3 * s, Lease: "g:p:1"},
		{Kind: faultcheck.Revoked, Worker: "w1", T: 2 * s, Token: 5, Lease: "g:p:0"},
		{Kind: faultcheck.Revoked, Worker: "w2", T: 2 * s, Token: 3, Lease: "g:p:1"},
		{Kind: faultcheck.Elected, Worker: "w2", T: 4 * s, Token: 6, Lease: "g:p:0"},
		{Kind: faultcheck.Act, Worker: "w2", T: 4 * s, Token: 6, Until: 5 * s, Lease: "g:p:0"},
		{Kind: faultcheck.Revoked, Worker: "w2", T: 5 * s, Token: 6, Lease: "g:p:0"},
		{Kind: faultcheck.Exit, Worker: "w1", T: 6 * s},
		{Kind: faultcheck.Exit, Worker: "w2", T: 6 * s},
	}
	if r := faultcheck.Check(ok); len(r.Violations) != 0 || r.Acts != 3 || r.Elections != 3 {
		t.Fatalf("a clean two-partition history: %+v", r)
	}
	for _, tc := range []struct {
		name  string
		plant func([]faultcheck.Event) []faultcheck.Event
		want  string
	}{
		{"two valid owners of one partition", func(es []faultcheck.Event) []faultcheck.Event {
			es[9].T = 2*s + s/2 // w2 acts on p0 while w1 believed it valid until 3s
			es[8].T = 2*s + s/2
			return es
		}, "g:p:0: token 6 (w2) acted"},
		{"a partition's token going back", func(es []faultcheck.Event) []faultcheck.Event {
			es[8].Token, es[9].Token, es[10].Token = 4, 4, 4
			return es
		}, "g:p:0: token went from 5 to 4"},
		{"a partition left open at exit", func(es []faultcheck.Event) []faultcheck.Event {
			return append(es[:7], es[8:]...) // w2 never hears OnRevoked for p1
		}, "g:p:1: w2 run 0: exited with term 3 still open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := tc.plant(append([]faultcheck.Event(nil), ok...))
			r := faultcheck.Check(es)
			found := false
			for _, v := range r.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Fatalf("want a violation containing %q, got %v", tc.want, r.Violations)
			}
		})
	}
}

// A voluntary handover: w1's last act believed its term valid until 3s,
// but its term was handed over (STEPPED_DOWN): its task returned at 1.2s,
// before the lease was released, and w2 acted from 1.5s. No violation;
// the same history with an involuntary end is one, and so is an act of
// w1 after its task returned.
func TestVoluntaryHandoverEndsTheWindowWhenTheTaskReturned(t *testing.T) {
	handover := func(reason string) []faultcheck.Event {
		return []faultcheck.Event{
			{Kind: faultcheck.Elected, Worker: "w1", T: 1 * s, Token: 5, Lease: "g:p:0"},
			{Kind: faultcheck.Act, Worker: "w1", T: 1 * s, Token: 5, Until: 3 * s, Lease: "g:p:0"},
			{Kind: faultcheck.Returned, Worker: "w1", T: 1*s + s/5, Token: 5, Lease: "g:p:0"},
			{Kind: faultcheck.Revoked, Worker: "w1", T: 1*s + s/4, Token: 5, Reason: reason, Lease: "g:p:0"},
			{Kind: faultcheck.Elected, Worker: "w2", T: 1*s + s/2, Token: 6, Lease: "g:p:0"},
			{Kind: faultcheck.Act, Worker: "w2", T: 1*s + s/2, Token: 6, Until: 3 * s, Lease: "g:p:0"},
		}
	}
	if r := faultcheck.Check(handover("STEPPED_DOWN")); len(r.Violations) != 0 {
		t.Fatalf("a voluntary handover: %v", r.Violations)
	}
	if r := faultcheck.Check(handover("TAKEN_OVER")); len(r.Violations) == 0 {
		t.Fatal("an involuntary end inside the believed window: no violation")
	}
	late := handover("STEPPED_DOWN")
	late = append(late[:3], append([]faultcheck.Event{{Kind: faultcheck.Act, Worker: "w1", T: 1*s + s/5 + 1, Token: 5, Until: 3 * s, Lease: "g:p:0"}}, late[3:]...)...)
	if r := faultcheck.Check(late); len(r.Violations) == 0 {
		t.Fatal("an act after the task returned, inside the next owner's term: no violation")
	}
}
