// Package group shares N partitions among the live members of a partition
// group, each partition owned by exactly one member at a time under its own
// lease and fencing token: the Go form of Simba's partition groups
// (@SimbaPartitioned, GroupTask).
//
// A member is a session that joined the group ([Join]). Its membership is
// an ordinary lease (<group>:m:<member>.<partitions>, carrying the count
// it was configured with), so it ends with its session;
// members see each other by listing the group's leases through the
// backend's inspection capability (driver.Inspector) every candidate
// tick. From the same view every member computes the same assignment
// ([Assign]): fair (⌊N/m⌋ or ⌈N/m⌉ each), sticky (a join moves only the new
// member's share, a leave only the leaver's partitions). Each partition is
// a lease of its own (<group>:p:<n>) with its own term and token: a member
// gives back a partition it should no longer own in the handover order of
// elections (revoke, wait for the partition's tasks at most the term's
// remaining time, release with the token, then OnRevoked) and takes the
// partitions it should own in one batched backend call. A crashed
// member's partitions are taken once its session has expired on the
// backend. Members that disagree on the partition count (a rolling
// deploy that changes it) serve the smallest and report it; a member that
// cannot see its group for a lease duration withdraws; a group's lease
// names are refused to elections and locks. docs/adr/0100-group-assignment.md,
// 0101-group-membership.md and 0189 to 0194 explain the choices.
package group
