package group

import (
	"errors"
	"testing"

	"github.com/simba-go/simba/internal/layer"
)

func TestParsePartitionLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		group string
		p     int
		ok    bool
	}{
		{"orders:p:0", "orders", 0, true},
		{"orders:p:1023", "orders", 1023, true},
		{"orders:p:007", "", 0, false},
		{"orders:p:-1", "", 0, false},
		{"orders:p:65536", "", 0, false},
		{"orders:m:abc", "", 0, false},
		{"a:b:p:1", "", 0, false},
		{":p:1", "", 0, false},
		{"plain", "", 0, false},
	} {
		g, p, ok := ParsePartitionLease(tc.name)
		if g != tc.group || p != tc.p || ok != tc.ok {
			t.Errorf("ParsePartitionLease(%q) = %q, %d, %v; want %q, %d, %v", tc.name, g, p, ok, tc.group, tc.p, tc.ok)
		}
	}
}

// Whatever a backend's inspection returns, a name is read as a partition
// only if it is exactly the name the group itself would make.
func FuzzParsePartitionLease(f *testing.F) {
	f.Add("orders:p:12")
	f.Add("x:p:0")
	f.Add("x:p:+1")
	f.Fuzz(func(t *testing.T, name string) {
		g, p, ok := ParsePartitionLease(name)
		if !ok {
			return
		}
		gr := &Group{name: g, n: MaxPartitions}
		if gr.partitionName(p) != name {
			t.Fatalf("%q parsed as group %q partition %d, which names %q", name, g, p, gr.partitionName(p))
		}
		if q, ok := gr.partitionOf(name); !ok || q != p {
			t.Fatalf("partitionOf(%q) = %d, %v; ParsePartitionLease said %d", name, q, ok, p)
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("orders", 64)
	f.Add("a:b", 1)
	f.Fuzz(func(t *testing.T, name string, n int) {
		err := Validate(name, n)
		if err != nil && !errors.Is(err, ErrInvalidGroup) {
			t.Fatalf("Validate(%q, %d) = %v, not ErrInvalidGroup", name, n, err)
		}
		if err == nil {
			gr := &Group{name: name, n: n, id: "0123456789abcdef0123456789abcdef"}
			for _, lease := range []string{gr.memberName(), gr.partitionName(n - 1)} {
				if len(lease) > 128 {
					t.Fatalf("valid group %q makes lease name %q longer than the limit", name, lease)
				}
			}
		}
	})
}

// The member record carries the member's partition count, and reads back
// as exactly the member and count that made it (ADR 0189); a record of
// the older form (no count) still reads as a member.
func TestMemberRecordNameRoundTrips(t *testing.T) {
	for _, n := range []int{1, 12, MaxPartitions} {
		g := &Group{name: "orders.eu", n: n, id: "n-1_A"}
		grp, id, count, ok := layer.GroupMember(g.memberName())
		if !ok || grp != g.name || id != g.id || count != n {
			t.Fatalf("GroupMember(%q) = %q, %q, %d, %v", g.memberName(), grp, id, count, ok)
		}
	}
	if _, id, count, ok := layer.GroupMember("orders:m:old"); !ok || id != "old" || count != 0 {
		t.Fatalf("an older record reads as %q, %d, %v; want old, 0, true", id, count, ok)
	}
	for _, bad := range []string{"orders:m:a.0", "orders:m:a.012", "orders:m:a.65537", "orders:m:a.b.1", "orders:m:", "a:b:m:x.1"} {
		if _, _, _, ok := layer.GroupMember(bad); ok {
			t.Fatalf("GroupMember(%q) accepted a name no group makes", bad)
		}
	}
}
