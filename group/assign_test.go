package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func members(m int) []string {
	out := make([]string, m)
	for i := range out {
		out[i] = fmt.Sprintf("m%02d", i)
	}
	return out
}

func counts(owners []string) map[string]int {
	c := make(map[string]int)
	for _, o := range owners {
		c[o]++
	}
	return c
}

func checkFair(t *testing.T, n int, ms []string, owners []string) {
	t.Helper()
	c := counts(owners)
	lo, hi := n/len(ms), (n+len(ms)-1)/len(ms)
	for _, m := range ms {
		if c[m] < lo || c[m] > hi {
			t.Fatalf("n=%d m=%d: %s owns %d, want %d or %d", n, len(ms), m, c[m], lo, hi)
		}
	}
	if c[""] != 0 {
		t.Fatalf("n=%d m=%d: %d partitions unassigned", n, len(ms), c[""])
	}
}

func moved(a, b []string) int {
	k := 0
	for i := range a {
		if a[i] != b[i] {
			k++
		}
	}
	return k
}

// A join moves at most ⌈N/m⌉ partitions (exactly the newcomer's share), a
// leave only the leaver's, and a settled assignment is a fixed point.
func TestAssignFairStickyStable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + r.IntN(300)
		m := 1 + r.IntN(12)
		ms := members(m + 1)
		base := Assign(n, ms[:m], nil)
		checkFair(t, n, ms[:m], base)
		if again := Assign(n, ms[:m], base); moved(base, again) != 0 {
			t.Fatalf("n=%d m=%d: a settled assignment moved %d partitions", n, m, moved(base, again))
		}
		joined := Assign(n, ms, base)
		checkFair(t, n, ms, joined)
		if k, bound := moved(base, joined), (n+m)/(m+1); k > bound {
			t.Fatalf("n=%d m=%d→%d: a join moved %d partitions, more than ⌈N/m⌉=%d", n, m, m+1, k, bound)
		}
		if m > 1 {
			gone := ms[r.IntN(m)]
			var rest []string
			for _, x := range ms[:m] {
				if x != gone {
					rest = append(rest, x)
				}
			}
			left := Assign(n, rest, base)
			checkFair(t, n, rest, left)
			for p := range base {
				if base[p] != gone && left[p] != base[p] {
					t.Fatalf("n=%d: a leave of %s moved partition %d from %s to %s", n, gone, p, base[p], left[p])
				}
			}
		}
	}
}

// The answer depends on the member set, not the order it is listed in.
func TestAssignIsDeterministic(t *testing.T) {
	ms := members(7)
	a := Assign(1024, ms, nil)
	rev := []string{ms[6], ms[5], ms[4], ms[3], ms[2], ms[1], ms[0], ms[3]}
	if b := Assign(1024, rev, nil); moved(a, b) != 0 {
		t.Fatal("the same members listed in another order gave another assignment")
	}
	if len(Assign(5, nil, nil)) != 5 || Assign(5, nil, nil)[0] != "" {
		t.Fatal("with no members nothing is assigned")
	}
}

// Partitions held by non-members or by nobody are assigned; a member that
// holds too many keeps its quota.
func FuzzAssign(f *testing.F) {
	f.Add(10, 3, []byte{0, 1, 2, 3, 4})
	f.Add(1, 1, []byte{})
	f.Fuzz(func(t *testing.T, n, m int, held []byte) {
		if n < 1 || n > 2000 || m < 1 || m > 40 {
			return
		}
		ms := members(m)
		cur := make([]string, n)
		for i := 0; i < n && i < len(held); i++ {
			if k := int(held[i]); k < m {
				cur[i] = ms[k]
			} else if k%2 == 0 {
				cur[i] = "stranger"
			}
		}
		out := Assign(n, ms, cur)
		checkFair(t, n, ms, out)
		if again := Assign(n, ms, out); moved(out, again) != 0 {
			t.Fatal("not a fixed point")
		}
	})
}
