package session_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

type idle struct{}

func (idle) Won(*term.Term)                     {}
func (idle) Lost(*term.Term, term.RevokeReason) {}
func (idle) Closed()                            {}

// Dropping claims costs O(1) each, amortised: each drop used to copy the
// session's whole claim list, so that a Leave of 65,536 partitions did
// 65,536 copies of up to 65,536 pointers under the lock (issue 20, item
// 8; ADR 0194). Measured in bytes allocated, which do not depend on the
// machine's load: dropping half of 20,000 claims allocated about 800 MB
// before, well under a megabyte now.
func TestDroppingClaimsIsLinear(t *testing.T) {
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s := openDecorated(t, b)
	eng := layer.MustOf(s)
	const n = 20000
	cs := make([]layer.Claim, n)
	for i := range cs {
		c, err := eng.Claim("c"+strconv.Itoa(i), idle{})
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	eng.Do(func() {
		for _, c := range cs[:n/2] {
			c.Drop()
		}
	})
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Fatalf("dropping %d of %d claims allocated %d bytes: the claim list is copied per drop", n/2, n, got)
	}
	if k := len(s.Snapshot().Entries); k != n/2 {
		t.Fatalf("Snapshot lists %d claims after the drops, want %d", k, n/2)
	}
	// The survivors still work and are listed in registration order.
	if e := s.Snapshot().Entries; e[0].Name != "c10000" || e[len(e)-1].Name != "c19999" {
		t.Fatalf("Snapshot after the drops lists %s … %s, want c10000 … c19999", e[0].Name, e[len(e)-1].Name)
	}
}
