// Package etcdsimba is the Simba backend for etcd v3 (go.etcd.io/etcd/client/v3):
// the Simba session is an etcd lease, a Simba lease is a key on that etcd
// lease, and tokens come from the keys' create revisions.
//
// # Sessions
//
// [Backend.Open] grants an etcd lease with the lease duration asked for
// (in whole seconds, capped by [WithMaxLease]); its id in hex is the
// session's [driver.ID]. [Backend.Renew] is one KeepAliveOnce whatever the
// number of leases held, with one transaction comparing the namespace's
// epoch in parallel; the remaining time is the TTL the server restarted,
// counted from when it handled the keepalive, never a comparison of clocks.
// Nothing else keeps the etcd lease alive: a process that stops renewing
// loses its leases at the server after the TTL (docs/adr/0207-etcd-sessions.md).
//
// # Leases and tokens
//
// A lease is the key <ns>/@simba/l/<name>, put on the session's etcd lease
// in a transaction only if it is absent and the epoch is the session's.
// Its token is start<<32 + (create revision − epoch revision), where start
// is the epoch's start second: strictly increasing within an epoch, and
// above every earlier epoch's tokens after a loss
// (docs/adr/0208-etcd-epoch-tokens.md).
//
// # Data loss
//
// The key <ns>/@simba/epoch is the namespace's epoch record. A namespace
// deleted by prefix, recreated, or a cluster rebuilt from empty disks fails
// the epoch comparison of every Acquire and Renew: the session answers
// [driver.ErrExpired], and the next Open creates a new epoch in quarantine
// for one MaxLease. A restore from a snapshot keeps an old record, and is
// seen otherwise: the store's revision runs ahead of its raft applied index
// by more than when the epoch was written (checked at every Open and Init),
// or a reply's revision falls below one this process already saw
// (docs/adr/0209-etcd-restore-detection.md). A namespace never used is
// quarantined too unless [Backend.Init] created it.
//
// # The revoke guard
//
// Every etcd but 3.4.31-3.4.33 and 3.5.13-3.5.15 may revoke a live lease
// when a leader that stalled longer than a lease resumes
// (etcd-io/etcd#15247; 3.5.16 and later, 3.6 included, skip the fix's
// leadership check right after a pause, ADR 0320). The
// revoke guard, on by default, gives every term a lock-delay marker of
// its session's lease, so a name whose term ended without a release is
// refused until its holder's belief has run out. It turns off once the
// Backend has proven that every member runs a fixed version, and back on
// (marking the live terms) when a member shows otherwise; see
// [WithRevokeGuard], [WithoutRevokeGuard],
// docs/adr/0290-etcd-early-revoke-guard.md and
// docs/adr/0305-etcd-revoke-guard-by-default.md.
//
// # Broadcast and inspection
//
// One watch per Backend on the namespace's lease keys turns every delete (a
// release, a Close's revocation, an etcd lease the server expired) into a
// [driver.Notice] at once (docs/adr/0210-etcd-watch.md). [Backend.Inspect]
// reads by prefix.
//
// # Security
//
// The backend uses the user's *clientv3.Client as it is: TLS, username and
// password, and endpoints are the client's. The namespace is checked by
// [ValidateNamespace]; every key lives under <ns>/@simba/, so no two valid
// namespaces share a key. The backend never writes outside that prefix and
// never closes the client.
package etcdsimba
