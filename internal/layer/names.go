package layer

import (
	"strconv"
	"strings"
)

// The lease names a partition group makes (ADR 0191): its member records
// <group>:m:<member-id>.<partitions> (and <group>:m:<member-id>, the form of
// members of versions before the count was carried) and its partitions
// <group>:p:<n>. A group's name holds no ':', so each form is one group's.
// Only a group's own claims may take a name of these forms: an election or
// a lock under one would be read as a member or would hold a partition
// (issue 20, item 6). The session refuses such names for every other claim
// (see GroupHandler).
const (
	// MaxGroupPartitions is the largest partition count of a group.
	MaxGroupPartitions = 65536
	// MaxMemberIDLen is the longest member ID.
	MaxMemberIDLen = 32
)

// GroupHandler is implemented by the ClaimHandlers of a group's own leases
// (its member record and its partitions): only they may claim a name of
// a group's forms ([IsGroupLease]).
type GroupHandler interface {
	GroupLease()
}

// ValidMemberID reports whether id is a member ID: 1 to 32 bytes of
// [A-Za-z0-9_-]. It returns the offset of the first bad byte, or -1 when
// the length is wrong, with ok false.
func ValidMemberID(id string) (bad int, ok bool) {
	if len(id) == 0 || len(id) > MaxMemberIDLen {
		return -1, false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return i, false
		}
	}
	return 0, true
}

// GroupMember parses a member record's name: the group, the member ID and
// the partition count the member was configured with (0 for a record of
// the older form, which carries none).
func GroupMember(name string) (group, id string, partitions int, ok bool) {
	group, rest, found := strings.Cut(name, ":m:")
	if !found || group == "" || strings.Contains(group, ":") {
		return "", "", 0, false
	}
	id, count, counted := strings.Cut(rest, ".")
	if _, valid := ValidMemberID(id); !valid {
		return "", "", 0, false
	}
	if counted {
		n, ok := canonical(count)
		if !ok || n < 1 || n > MaxGroupPartitions {
			return "", "", 0, false
		}
		partitions = n
	}
	return group, id, partitions, true
}

// GroupPartition parses a partition's lease name: the group and the
// partition, any of 0 to MaxGroupPartitions-1.
func GroupPartition(name string) (group string, partition int, ok bool) {
	group, rest, found := strings.Cut(name, ":p:")
	if !found || group == "" || strings.Contains(group, ":") {
		return "", 0, false
	}
	p, ok := canonical(rest)
	if !ok || p >= MaxGroupPartitions {
		return "", 0, false
	}
	return group, p, true
}

// IsGroupLease reports whether name has one of a group's forms.
func IsGroupLease(name string) bool {
	if _, _, _, ok := GroupMember(name); ok {
		return true
	}
	_, _, ok := GroupPartition(name)
	return ok
}

// canonical parses s, a non-negative decimal in its canonical form (no
// sign, no leading zero).
func canonical(s string) (int, bool) {
	if len(s) == 0 || len(s) > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}
