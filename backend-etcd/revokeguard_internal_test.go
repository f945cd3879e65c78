package etcdsimba

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestRevokesEarly(t *testing.T) {
	for v, want := range map[string]bool{
		"3.4.23": true, "3.4.30": true, "3.4.31": false, "3.4.33": false, "3.4.34": true, "3.4.40": true,
		"3.5.0": true, "3.5.12": true, "3.5.13": false, "3.5.15": false, "3.5.16": true, "3.5.17": true, "3.5.21": true,
		// 3.5.16 and later skip the leadership check after a pause (ADR 0320).
		"3.6.0": true, "3.6.0-rc.1": true, "3.7.3": true, "v3.5.13": false, "v3.5.15-rc.0": false, "3.3.27": true, "2.3.8": true, "4.0.0": true,
		"": true, "3.4": true, "3.x.1": true, "garbled": true,
	} {
		if got := revokesEarly(v); got != want {
			t.Errorf("revokesEarly(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestJudge: the guard turns off only on a member list in which every
// member told a fixed version; a member without one (no answer, not
// started), an affected one, one that answered without being on the list,
// or no list at all (or an empty one) keeps it on.
func TestJudge(t *testing.T) {
	list := []*pb.Member{{ID: 1, Name: "a"}, {ID: 2, Name: "b"}, {ID: 3, Name: "c"}}
	for _, tc := range []struct {
		name     string
		list     []*pb.Member
		versions map[uint64]string
		why      string
		fixed    bool
	}{
		{"all fixed", list, map[uint64]string{1: "3.5.13", 2: "3.4.31", 3: "3.5.15"}, "", true},
		{"one affected", list, map[uint64]string{1: "3.5.13", 2: "3.4.30", 3: "3.5.15"}, "", false},
		{"one a later release", list, map[uint64]string{1: "3.5.13", 2: "3.4.31", 3: "3.5.17"}, "", false},
		{"one silent", list, map[uint64]string{1: "3.5.13", 3: "3.5.15"}, "", false},
		{"one garbled", list, map[uint64]string{1: "3.5.13", 2: "x", 3: "3.5.15"}, "", false},
		{"an affected member off the list", list, map[uint64]string{1: "3.5.13", 2: "3.5.13", 3: "3.5.15", 4: "3.5.0"}, "", false},
		{"no list", nil, map[uint64]string{1: "3.5.13"}, "no member list", false},
		{"an empty list", []*pb.Member{}, map[uint64]string{1: "3.5.13"}, "", false},
		{"nothing", nil, nil, "", false},
	} {
		v := judge(tc.list, tc.versions, revokesEarly, tc.why)
		if v.fixed != tc.fixed || !v.fixed && v.why == "" {
			t.Errorf("%s: fixed %v (why %q), want %v with a reason when not", tc.name, v.fixed, v.why, tc.fixed)
		}
	}
}
