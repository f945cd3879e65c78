package backendtest

import (
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// Config describes the backend under test.
type Config struct {
	// NewBackend returns a new client of the backend in namespace. The kit
	// calls it once per client it needs; clients of the same namespace see
	// each other's sessions and leases, clients of different namespaces
	// never do. It should register the client's cleanup with t.Cleanup and
	// fail t (naming the environment variable) if the server is missing.
	// It may be called from parallel subtests at once. Required.
	NewBackend func(t *testing.T, namespace string) driver.Backend

	// Lease is the lease duration the kit asks for. The expiry subtests
	// wait about 1.5 × Lease, so keep it short (2s is a good value on a
	// real server). Required.
	Lease time.Duration

	// LoseData, if not nil, wipes the store's data like a restart without
	// persistence (a Redis FLUSHALL, say). The kit calls it once, when no
	// other subtest of this Run is active, and then checks that tokens keep
	// rising or that the backend refuses with an error.
	LoseData func(t *testing.T)

	// MaxLease is the longest lease the backend under test grants: the
	// cap it was built with (WithMaxLease, the same option on every
	// backend), which is also the length of its quarantine after a data
	// loss (ADR 0130). When set, the kit checks that no grant exceeds it,
	// and, with LoseData, that the backend quarantines: right after the loss
	// an Acquire grants nothing and answers a Quarantine in (0, MaxLease],
	// no shorter than MaxLease less the time since the loss; the quarantine
	// counts down rather than restarting; and once it has passed, Acquire
	// grants again with higher tokens. Unless Advance is set the kit waits
	// the quarantine out on real time (renewing its session meanwhile), so
	// build the backend under test with a short cap: Lease is a good value.
	// Zero means the backend does not quarantine (it has not implemented
	// ADR 0130 yet): the data-loss subtest then checks tokens only, and
	// fails if a reply announces a quarantine anyway.
	MaxLease time.Duration

	// MaxLockDelay is the longest lock-delay the backend under test
	// honours: the cap it was built with (WithMaxLockDelay, the same option
	// on every backend; driver.AcquireRequest.LockDelay). When set, the kit
	// checks that a term won with this delay and ended by its session's
	// expiry leaves its name refused to another session for the delay
	// after the session's end, then granted with a higher token; that a
	// Release or a Close frees the name at once; that a delay above it,
	// or a negative one, fails the whole request with an error wrapping
	// driver.ErrLockDelay and naming WithMaxLockDelay; and, with LoseData
	// and MaxLease, that the quarantine lasts MaxLease + MaxLockDelay.
	// Without Advance the expiry subtest waits about Lease + MaxLockDelay
	// + 2 × ExpiryGrace of real time, so keep it short (1 to 2s) and longer
	// than ExpiryGrace, or the check that the delay is honoured says little.
	// The backend's delay may end up to ExpiryGrace late (a TTL's
	// rounding), as its sessions may. Zero skips the lock-delay subtests.
	MaxLockDelay time.Duration

	// HoldAfterExpiry declares a backend that may keep a name whose term
	// ended without a release (its session expired) refused for up to
	// this long after the first candidate found the end, whatever the
	// lock-delay asked: etcd's revoke guard (ADR 0305) holds such a name
	// for its session's lease. TakeoverAfterExpiry then asks again, its
	// session renewing, until the name is granted, and fails if that takes
	// longer than HoldAfterExpiry + 2 × ExpiryGrace after the session's
	// end at the latest. Zero (every other backend): the first Acquire
	// after the expiry must get the name.
	HoldAfterExpiry time.Duration

	// Init, if not nil, initialises a new namespace with the backend's
	// explicit initialisation step (Backend.Init on Redis and ZooKeeper),
	// which creates the namespace's epoch record so that its first use is
	// not quarantined. Setting it declares a backend that quarantines the
	// first Acquire on a namespace nobody initialised, since it cannot tell
	// a new namespace from one that lost its records; it requires MaxLease.
	// The kit calls it once per namespace, before the namespace's first
	// client is made, in every subtest but UninitialisedNamespaceQuarantined,
	// which checks that quarantine. It should fail t on error. Backends
	// that create their namespace in their constructor (the SQL schema
	// creation, memory.New) leave it nil.
	Init func(t *testing.T, namespace string)

	// Advance, if not nil, moves the backend's virtual clock forward by d.
	// The kit then never waits for real time, and runs every subtest
	// sequentially because one clock serves them all. If nil, the kit
	// waits on real timers.
	Advance func(t *testing.T, d time.Duration)

	// ExpiryGrace is how much longer than the granted lease the backend may
	// take to expire a session (ZooKeeper, for one, expires sessions on its
	// tick). Optional; default Lease/2.
	ExpiryGrace time.Duration

	// Polls declares a backend that does not broadcast releases (MySQL):
	// the kit then checks that it does not implement [driver.Broadcaster]
	// either. Without it, the kit requires a Broadcaster and checks its
	// notices.
	Polls bool

	// NoticeTimeout bounds the wait for a release notice from a
	// [driver.Broadcaster]. Optional; default 5s.
	NoticeTimeout time.Duration

	// CallTimeout bounds every backend call the kit makes. Optional;
	// default 10s.
	CallTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.ExpiryGrace <= 0 {
		c.ExpiryGrace = c.Lease / 2
	}
	if c.NoticeTimeout <= 0 {
		c.NoticeTimeout = 5 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	return c
}
