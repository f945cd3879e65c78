package zksimba

import "context"

// InspectCacheLen is the number of lease nodes Inspect keeps (tests only).
func InspectCacheLen(b *Backend) int {
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	return len(b.seen.nodes)
}

// InitForTest initialises a new namespace as Init did before ADR 0179: an
// epoch whose tokens start at its creation second, without Init's checks
// and without its wait for the next second. Only for a test's own new
// root (a random name: no epoch of it can have been lost), so that the
// hundred namespaces of the tests do not each wait up to a second; Init
// and ForceInit have tests of their own.
func InitForTest(ctx context.Context, b *Backend) error {
	conn, done, err := b.dialRead(ctx, nil)
	if err != nil {
		return err
	}
	defer done()
	if err := b.checkAncestors(ctx, conn); err != nil {
		return err
	}
	e, st, err := b.loadEpochStat(ctx, conn, noCreate)
	if err != nil || e != nil {
		return err
	}
	version := int32(-1)
	if st != nil {
		version = st.Version
	}
	_, err = b.createEpoch(ctx, conn, version, 0, false)
	return err
}

// CreatePendingInitForTest makes the quarantined epoch an Init makes
// first, marked pending, as an Init halfway through leaves it (ADR 0224).
func CreatePendingInitForTest(ctx context.Context, b *Backend) error {
	conn, done, err := b.dialRead(ctx, nil)
	if err != nil {
		return err
	}
	defer done()
	_, err = b.createEpoch(ctx, conn, -1, b.cfg.maxLease, true)
	return err
}

// TokenFloor is the highest token b has reported (tests only).
func TokenFloor(b *Backend) uint64 { return b.maxTok.Load() }

// RaiseTokenFloorForTest raises the highest token b has reported to t, as
// if it had reported a grant of token t (tests only): a stand-in for an
// ensemble that lost data and hands out lower tokens than before.
func RaiseTokenFloorForTest(b *Backend, t uint64) { b.maxTok.Store(max(b.maxTok.Load(), t)) }
