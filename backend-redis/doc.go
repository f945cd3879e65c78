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
//	err = b.Init(ctx) // once, for a namespace never used before
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
//	simba:{ns}:l:<name>  hash: the lease. Field "s" is the owner session id
//	                     (absent when free), "t" the last token handed out
//	                     for the name, "w" set when an Acquire was refused
//	                     the name since its last notice. Never expires, so
//	                     tokens keep rising.
//	simba:{ns}:rel       pub/sub channel: space-separated released names
//	                     that were waited for ("w").
//	simba:{ns}:epoch     string: "<q> <run_id>": q is 0 or the end of a
//	                     quarantine in µs of Redis TIME, run_id the Redis
//	                     process that wrote it. Created by [Backend.Init],
//	                     or by the first Acquire that finds it missing or
//	                     written by another process (a restart, failover
//	                     or slot move: see [WithoutRestartQuarantine]).
//	simba:{ns}:names     sorted set: every name ever won (inspection).
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
// is treated the same way. A new namespace looks like a lost one: call
// [Backend.Init] once, at its first deployment.
//
// Fencing tokens are max(last token + 1, Redis TIME in microseconds): they
// rise strictly per name, and keep rising when Redis loses its data
// (restart without persistence, FLUSHALL, failover to a replica that
// missed writes) as long as the Redis clock does not step back. The README
// and docs/adr/0020-redis-tokens.md explain why and the limits.
//
// The client must have ContextTimeoutEnabled set: the engine bounds every
// call by one renewal period through its context, and without that
// setting go-redis would wait for its own read timeout instead. [New]
// refuses a client without it.
package redissimba
