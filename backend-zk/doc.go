// Package zksimba is the Simba backend for ZooKeeper (go-zookeeper/zk):
// the ZooKeeper session is the Simba session, leases are ephemeral nodes and
// tokens are their creation zxids.
//
// # Sessions
//
// [Backend.Open] dials a new connection and so opens a new ZooKeeper
// session; its id (as 0x%016x) is the session's [driver.ID]. One Backend
// serves any number of sessions at once, one connection each; a process
// normally opens one (docs/adr/0043-zk-sessions.md). ZooKeeper
// clamps the requested timeout to the server's [minSessionTimeout,
// maxSessionTimeout]; the backend reads the timeout actually negotiated from
// every connect response and never assumes the requested one.
//
// One renewal proves the session alive on the ZooKeeper leader for 5/12 of
// the negotiated timeout ([Grant]), so every reply carries that much
// remaining time and the engine renews about every 5/36 of the timeout
// (with a 15 s timeout, every ~2 s). Open reports that rule as
// driver.OpenReply.Nominal, so the engine warns (SessionLeaseShortened)
// only when the server clamped the timeout below the one asked for.
// docs/adr/0040-zk-renewal.md explains the number.
//
// When ZooKeeper expires a session, go-zookeeper would silently open a new
// one on the same connection. The backend does not let it: its dialer
// refuses to reconnect once a connect response reports the session expired,
// the connection is closed, and the session id answers
// [driver.ErrExpired] from then on, so the engine opens a new session.
//
// go-zookeeper's own pings would keep a ZooKeeper session alive for as long
// as its connection lasts, renewed by Simba or not. A watchdog therefore
// closes a session that has not been renewed for its whole negotiated
// timeout, so that a stuck process does not hold its leases forever
// (docs/adr/0042-zk-watchdog.md).
//
// # Leases
//
// A lease is the ephemeral node <root>/<name>, created (with the data set in
// the same multi, so one round trip returns its Stat) only if absent. The
// token is the node's czxid counted from the namespace epoch, above the
// epoch's start second: start<<32 + (czxid − epoch czxid), strictly
// increasing across all creations and across a lost namespace. A won lease counts only if the node's ephemeralOwner is this
// session. Renew is one request (a multi with one version check of the
// root); the owned set is kept from the backend's own acquisitions and
// releases and from a watch on each owned node.
//
// # Data loss
//
// The root's data is the namespace's epoch record and <root>/@epoch/<id>
// its identity; every Acquire and Renew checks that node in its multi. A
// root deleted (even one an older client recreated) or an ensemble rebuilt
// from empty disks fails that check in every process: the session answers
// driver.ErrExpired, and the next Open creates a new epoch and quarantines
// the namespace for one MaxLease ([WithMaxLease]) on the server clock, read
// from the ctime of the lease node each Acquire creates, so no extra round
// trip: Acquire grants nothing and answers driver.AcquireReply.Quarantine.
// A namespace never used is quarantined the same way unless [Backend.Init]
// created it (docs/adr/0138-zk-epoch-tokens.md); Init refuses where records
// may have been lost within one MaxLease, and [Backend.ForceInit] skips
// that check (docs/adr/0179-zk-init-safety.md).
//
// # Broadcast
//
// A failed acquisition arms an exists watch on the holder's node; its
// deletion (a release, or the holder's session expiring at the server)
// reaches [Backend.Subscribe] subscribers at once as a [driver.Notice].
//
// # Security
//
// The namespace root is validated by [ValidateRoot]; lease names by
// deadline.ValidateName. [WithDigestAuth] and [WithACL] protect the
// namespace and lease nodes.
package zksimba
