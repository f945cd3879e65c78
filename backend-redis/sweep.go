package redissimba

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/session/driver"
)

// The sweep removes the records of names nobody holds any more that no
// release or close removed: leases whose owner's session expired (once
// their lock-delay has passed) and records an earlier version left. A
// takeover reclaims such a record too, but a name used once is never taken
// over, so without the sweep every crashed session would leave its names
// behind for good (ADR 0245).
//
// It is piggy-backed on Acquire: every sweepEvery-th Acquire call of a
// Backend, after its own work, looks at the next sweepBatch names of the
// name index (a cursor that wraps around), so the sweep costs a bounded
// amount per call, never a scan, and keeps up with the records that
// Acquires create. It runs in two phases so that every key the deciding
// script touches is declared (ADR 0131): a read of the index and of the
// owners (the read-only inspect script), then the sweep script with the
// owners' session keys as hints; an owner that changed in between is left
// for the next round.
const (
	sweepEvery = 64
	sweepBatch = 64
)

// sweepStep runs one bounded step of the sweep. Its errors are not the
// Acquire's: a step that fails is tried again by a later one.
func (b *Backend) sweepStep(ctx context.Context) {
	if !b.sweepMu.TryLock() {
		return // another call is sweeping
	}
	defer b.sweepMu.Unlock()
	_, _ = b.sweep(ctx)
}

// sweep looks at the next sweepBatch indexed names after b.sweepAt and
// deletes the records nobody holds; it returns how many it deleted. The
// caller holds sweepMu.
func (b *Backend) sweep(ctx context.Context) (int, error) {
	lo := "-"
	if b.sweepAt != "" {
		lo = "(" + b.sweepAt
	}
	names, err := b.rdb.ZRangeByLex(ctx, b.keys.names, &redis.ZRangeBy{Min: lo, Max: "+", Count: sweepBatch}).Result()
	if err != nil {
		return 0, fmt.Errorf("redissimba: sweep: %w", err)
	}
	if len(names) < sweepBatch {
		b.sweepAt = "" // the next step starts over
	} else {
		b.sweepAt = names[len(names)-1]
	}
	if len(names) == 0 {
		return 0, nil
	}
	// Phase 1: the owners, read by the inspect script without hints, which
	// answers {name, "?", owner} for every lease with an owner.
	n := len(names)
	ks := make([]string, n, 2*n+3)
	args := make([]any, 2, 2*n+3)
	args[0], args[1] = b.argSession, n
	for i, name := range names {
		ks[i] = b.keys.lease + name
		args = append(args, name)
	}
	for range names {
		args = append(args, 0)
	}
	res, err := inspectScript.Run(ctx, b.rdb, ks, args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("redissimba: sweep: %w", err)
	}
	owners := make(map[string]string, len(res))
	for _, r := range res {
		if f, ok := r.([]any); ok && len(f) == 3 {
			name, _ := f[0].(string)
			sid, _ := f[2].(string)
			owners[name] = sid
		}
	}
	// Phase 2: the sweep script, with the owners' session keys declared.
	ks = append(ks[:0], b.keys.names, b.keys.hw, b.keys.lineage)
	args = append(args[:0], b.argSession, n)
	for _, name := range names {
		ks = append(ks, b.keys.lease+name)
		args = append(args, name)
	}
	for _, name := range names {
		sid, ok := owners[name]
		if !ok || !validID(driver.ID(sid)) {
			args = append(args, 0)
			continue
		}
		ks = append(ks, b.keys.session+sid)
		args = append(args, len(ks))
	}
	args = append(args, b.argChannel)
	gone, err := sweepScript.Run(ctx, b.rdb, ks, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("redissimba: sweep: %w", err)
	}
	return gone, nil
}
