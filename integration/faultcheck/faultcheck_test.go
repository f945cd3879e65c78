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
