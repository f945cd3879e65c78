// Package redissimba is the Simba backend for Redis standalone, Sentinel
// and Cluster (go-redis/v9), with atomic scripts and pub/sub release
// broadcast.
//
// [New] takes the application's own [redis.UniversalClient] and a
// namespace, and returns a [*Backend] that implements [driver.Backend] and
// [driver.Broadcaster]:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	b, err := redissimba.New(rdb, "billing")
//	err = b.Init(ctx) // safe at every start; refuses (ErrInitUnsafe) on signs of a recent loss
//
// Every operation is one Lua script, called by SHA (go-redis reloads it
// on NOSCRIPT), so it is atomic on the server. Every key of a namespace
// carries the hash tag {namespace}, so on a Redis Cluster each operation
// touches one slot. Durations come from the Redis clock (PEXPIRE, PTTL);
// the client never compares its clock with Redis's.
//
// Key layout for namespace ns (names and ids are validated before they are
// put in a key, so no user string reaches a key unchecked):
//
//	simba:{ns}:s:<id>    hash: the session. Field "#v" is the owned-set
//	                     version, "#d" the lease in ms, and one field per
//	                     owned lease name holding its token. Expires (PEXPIRE)
//	                     one lease after the last renewal.
//	simba:{ns}:l:<name>  hash: the lease, while a term may hold it. Field
//	                     "s" is the owner session id, "t" its token, "w"
//	                     set when an Acquire was refused the name, "d" the
//	                     term's lock-delay in ms, "e" when a candidate found
//	                     the owner's session gone. Deleted by the release or
//	                     close that frees the name, replaced by a takeover,
//	                     or deleted by the sweep (ADR 0245).
//	simba:{ns}:rel       pub/sub channel: space-separated released names
//	                     that were waited for ("w").
//	simba:{ns}:epoch     string: "<q> <run_id>": q is 0 or the end of a
//	                     quarantine in µs of Redis TIME, run_id the Redis
//	                     process that wrote it. Created by [Backend.Init],
//	                     or by the first Acquire that finds it missing or
//	                     written by another process (a restart, failover
//	                     or slot move: see [WithoutRestartQuarantine]).
//	simba:{ns}:lineage   hash: "h" the master_replid of the replication
//	                     history the epoch was written in (a promotion
//	                     anywhere changes it), "y" what started the last
//	                     quarantine, "v" the layout ("2"); written with the
//	                     epoch.
//	simba:{ns}:hw        string: the highest token the namespace handed
//	                     out; every grant is above it (ADR 0245).
//	simba:{ns}:names     sorted set: the names with a lease key (inspection,
//	                     the sweep).
//
// Every key a script touches is declared in KEYS, also those a script
// learns while running (an owner's session, the leases a session owns),
// so a Redis Cluster slot migration never makes a live key look missing.
//
// Quarantine after data loss: the acquire script reads the epoch in the
// script that grants. Missing (a FLUSHALL, a restart without persistence),
// it is recreated with a quarantine of one maximum lease ([WithMaxLease],
// default [DefaultMaxLease], which also caps every session's lease), and no
// lease is granted until it ends, so no term granted before the loss can
// overlap a new one. Written by another Redis process (its run_id differs:
// a restart from an older snapshot or AOF, a failover, a slot moved to
// another Cluster node, any of which may have lost the latest grants), it
// is treated the same way, and so is a history other than the lineage's
// (master_replid: a failover, or a failover and back to the same process).
// A new namespace looks like a lost one: [Backend.Init], safe at every
// start, creates its epoch unless the server shows a sign of a recent loss
// (then the first use waits); [Backend.ForceInit] is for the operator who
// knows the namespace is new. A memory limit with an evicting
// maxmemory-policy is refused ([ErrServerUnsafe]): an evicted session would
// make its live owner's lease look free.
//
// Fencing tokens are max(high-water mark + 1, Redis TIME in microseconds),
// with one high-water mark per namespace raised by every grant: they rise
// strictly per name without a per-name record, and keep rising when Redis
// loses its data (restart without persistence, FLUSHALL, failover to a
// replica that missed writes) as long as the Redis clock does not step back
// by more than the quarantine. The README, docs/adr/0020-redis-tokens.md
// and docs/adr/0245-redis-no-per-name-state.md explain why and the limits.
//
// The client must have ContextTimeoutEnabled set: the engine bounds every
// call by one renewal period through its context, and without that
// setting go-redis would wait for its own read timeout instead. [New]
// refuses a client without it.
package redissimba
