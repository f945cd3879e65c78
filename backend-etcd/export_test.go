package etcdsimba

import "time"

// TokenFloor is the highest token b has reported (tests only).
func TokenFloor(b *Backend) uint64 { return b.maxTok.Load() }

// RaiseTokenFloorForTest raises the highest token b has reported to t, as
// if it had reported a grant of token t (tests only): a stand-in for a
// store that went back and hands out lower tokens than before.
func RaiseTokenFloorForTest(b *Backend, t uint64) { b.maxTok.Store(max(b.maxTok.Load(), t)) }

// RevokesEarly reports whether etcd version v may commit a deposed
// leader's lease revocations (etcd-io/etcd#15247; tests only).
func RevokesEarly(v string) bool { return revokesEarly(v) }

// GuardOn says whether a grant b makes now carries the revoke guard
// (tests only).
func GuardOn(b *Backend) bool { return b.guardOn() }

// VersionsChecked says whether b's first version check has finished
// (tests only).
func VersionsChecked(b *Backend) bool {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	return b.g.done
}

// JudgeVersionsForTest makes b count a version as affected by
// etcd-io/etcd#15247 when affected says so, instead of by its number
// (tests only: the machine's servers are all affected, and the guard's
// turning off needs a fixed one). Call it before b's first Open.
func JudgeVersionsForTest(b *Backend, affected func(version string) bool) { b.g.affected = affected }

// RecheckVersionsForTest makes b's next Open or Renew ask the members'
// versions again, as it does once a minute (tests only).
func RecheckVersionsForTest(b *Backend) {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	b.g.started = time.Time{}
}

// VersionCheckRunning says whether a version check of b is running
// (tests only).
func VersionCheckRunning(b *Backend) bool {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	return b.g.running
}
