package group

import (
	"hash/fnv"
	"slices"
)

// Assign computes which member owns each of n partitions: the answer every
// member of a group computes from the same view, so they agree without
// talking to each other. members are the live members' IDs; current[p] is
// the member that holds partition p now ("" when nobody or a non-member
// holds it); len(current) must be n or current nil. The result has one
// member ID per partition ("" when members is empty).
//
// It is a sticky balancer (docs/adr/0100-group-assignment.md):
//
//   - fair: each member gets ⌊n/m⌋ or ⌈n/m⌉ partitions; the members that
//     hold the most now get the ⌈n/m⌉ quotas, so nobody who must shrink
//     is asked to grow;
//   - sticky: a member keeps what it holds up to its quota (it sheds the
//     partitions it ranks lowest by rendezvous hashing); only what is shed,
//     unheld, or held by a departed member moves, to the member with
//     spare quota that ranks it highest. A join therefore moves exactly
//     the new member's quota (at most ⌈n/m⌉), a leave only the leaver's
//     partitions;
//   - stable: applied to its own settled result, it returns it unchanged.
func Assign(n int, members []string, current []string) []string {
	out := make([]string, n)
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if n <= 0 || len(ms) == 0 {
		return out
	}
	idx := make(map[string]int, len(ms))
	for i, m := range ms {
		idx[m] = i
	}
	seeds := make([]uint64, len(ms))
	for i, m := range ms {
		h := fnv.New64a()
		h.Write([]byte(m))
		seeds[i] = h.Sum64()
	}
	held := make([][]int, len(ms))
	for p := 0; p < n && p < len(current); p++ {
		if i, ok := idx[current[p]]; ok {
			held[i] = append(held[i], p)
		}
	}
	// Quotas: ⌊n/m⌋ each, plus one for the n mod m members holding the
	// most (ties broken by ID, so every member computes the same).
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(held[b]) - len(held[a]) })
	quota := make([]int, len(ms))
	for rank, i := range order {
		quota[i] = n / len(ms)
		if rank < n%len(ms) {
			quota[i]++
		}
	}
	for i := range ms {
		ps := held[i]
		if len(ps) > quota[i] {
			// Keep the partitions this member ranks highest.
			slices.SortFunc(ps, func(a, b int) int { return cmpScore(score(seeds[i], b), score(seeds[i], a), a, b) })
			ps = ps[:quota[i]]
		}
		for _, p := range ps {
			out[p] = ms[i]
		}
		quota[i] -= len(ps)
	}
	for p := range out {
		if out[p] != "" {
			continue
		}
		best := -1
		var bestScore uint64
		for i := range ms {
			if quota[i] == 0 {
				continue
			}
			if sc := score(seeds[i], p); best < 0 || sc > bestScore {
				best, bestScore = i, sc
			}
		}
		out[p] = ms[best]
		quota[best]--
	}
	return out
}

// score is the rendezvous weight of partition p for the member whose ID
// hashes to seed: a 64-bit mix (splitmix64's finaliser) of both.
func score(seed uint64, p int) uint64 {
	z := seed ^ (uint64(p)+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func cmpScore(a, b uint64, pa, pb int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return pa - pb
}
