// Package memory is an in-memory [driver.Backend] and [driver.Broadcaster]
// for Simba's own tests: the session engine's unit tests, the seeded
// simulation and the demo. It is not for production: nothing survives the
// process, and nothing is shared between processes.
//
// A [Backend] is one namespace. [New] creates it; [Backend.NewClient] gives
// another client of the same namespace, sharing its sessions, leases, clock
// and subscribers but with its own faults and call counts, the way several
// nodes reach one server.
//
// # Time
//
// The backend reads its own [deadline.Clock] ([WithClock]; the system clock
// by default). Expiry is computed lazily from that clock at the start of
// every call: there are no goroutines and no timers, so with a
// [ManualClock] the backend is fully deterministic, and every call returns
// at once unless a fault says otherwise. The seeded simulation calls it
// synchronously from one goroutine.
//
// # Faults
//
// Tests inject faults through methods: [Backend.Pause] and [Backend.Resume]
// (calls block), [Backend.SetReplyDelay], [Backend.DropReplies] (the call
// takes effect but its reply is lost), [Backend.FailCalls] (calls fail
// without effect), [Backend.Expire] (a session expires now) and
// [Backend.LoseData] (a restart without persistence). [Backend.Owner],
// [Backend.Remaining] and [Backend.Stats] inspect the state without
// changing it.
//
// # Quarantine after data loss
//
// The namespace has an epoch record, as every backend does (ADR 0130).
// [Backend.LoseData] deletes it with everything else; the next Acquire finds
// it missing, recreates it, and starts a quarantine of one maximum lease
// ([WithMaxLease], default [DefaultMaxLease]) on the backend's clock: until
// then Acquire grants nothing and answers [driver.AcquireReply.Quarantine] =
// the time left. Every grant is capped by the same maximum lease, so by the
// end of the quarantine no session still believes in a term granted before
// the loss. [New] makes an initialised namespace (nothing existed before
// it); [WithUninitialisedNamespace] makes one that is quarantined at its
// first use unless [Backend.Init] runs first, as Redis and ZooKeeper
// namespaces are. [WithoutQuarantine] is the broken variant tests must
// catch.
//
// # Tokens after data loss
//
// Fencing tokens are epoch<<40 | counter, where the counter is one of 1024
// high-water marks, the name's bucket (FNV-1a 32 of the name mod 1024: a
// name always maps to the same bucket, so its tokens rise strictly, and a
// released name leaves no record behind), and the epoch counts the restarts
// that lost the counters. A restart that loses
// the counters ([Backend.LoseData] with keepTokens false) starts a new epoch,
// so every later token is still higher than every earlier one: the same
// mechanism the Redis backend uses with its namespace epoch. Epoch 0 gives
// the small tokens 1, 2, 3… that tests like to read.
package memory
