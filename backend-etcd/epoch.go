package etcdsimba

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/session/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The namespace epoch (docs/adr/0208-etcd-epoch-tokens.md). The key
// <ns>/@simba/epoch holds the record; every Acquire and Renew compares its
// value (which carries a random id) in the request that grants or renews,
// so a namespace deleted, or recreated by anyone, is seen by every process
// at its next request.

// ErrTokenRegressed is the error of an acquisition whose token would be
// lower than one this Backend value already handed out for the name, or
// whose key is older than the namespace's epoch. The lease is not made a
// term: its key is deleted.
var ErrTokenRegressed = errors.New("etcdsimba: fencing token went backwards (the cluster lost its data)")

// ErrTokenOverflow is the error of an acquisition whose token's high part
// (the epoch's start second, plus one per 2^32 revisions since) would run
// ahead of this process's clock by more than [clockSkew]: a clock behind
// the one that started the epoch, or more than 2^32 revisions a second. The
// lease is refused (its key deleted); a later attempt succeeds once the
// clock has caught up.
var ErrTokenOverflow = errors.New("etcdsimba: token would run ahead of this process's clock (its clock is behind the epoch creator's)")

// DefaultMaxLeaseCap is the longest WithMaxLease: a day.
const DefaultMaxLeaseCap = 24 * time.Hour

// clockSkew is how far a token's high part may run ahead of the granting
// process's wall clock (ADR 0208): it lets a process whose clock is a
// little behind the epoch creator's grant at once.
const clockSkew = 1 // second

// gapSlack is how far the revision-minus-applied-index gap may rise above
// the one recorded in the epoch before the backend calls it a restore. A
// Status reads the revision first and the applied index after, so a
// reading is at most one above the true gap (an entry whose write is in
// the revision but not yet in the applied index), and below it by the
// entries applied between the two reads (ADR 0209).
const gapSlack = 4

// record is the epoch key's value.
type record struct {
	// Epoch is a random id: a record recreated by anyone has another.
	Epoch string `json:"epoch"`
	// Start is the high part of the epoch's tokens, in seconds.
	Start uint64 `json:"start"`
	// QuarantineMS is the quarantine its creator applied: its WithMaxLease
	// plus its WithMaxLockDelay
	// after finding the records lost, 0 for Init.
	QuarantineMS int64 `json:"quarantine_ms"`
	// Gap is the store's revision minus its raft applied index just before
	// the record was written. Along one raft history that figure never
	// rises; a restore from a snapshot raises it (ADR 0209).
	Gap int64 `json:"gap"`
}

func (r record) valid() bool {
	if len(r.Epoch) != 16 || r.Start == 0 || r.Start >= 1<<32 || r.QuarantineMS < 0 || r.QuarantineMS > int64((DefaultMaxLeaseCap+MaxMaxLockDelay)/time.Millisecond) {
		return false
	}
	_, err := hex.DecodeString(r.Epoch)
	return err == nil
}

// epoch is what the backend knows of its namespace's epoch. Immutable.
type epoch struct {
	rec record
	raw string // the key's value, compared by every grant and renewal
	rev int64  // the key's ModRevision: tokens count from it
}

// token maps a lease key's create revision to its fencing token:
// start<<32 + (createRev − epoch revision), strictly increasing with the
// revision within the epoch, and above every token of every earlier epoch
// (ADR 0208). nowSec is the granting process's wall clock.
func (e *epoch) token(createRev, nowSec int64) (uint64, error) {
	if createRev <= e.rev {
		return 0, fmt.Errorf("%w: key revision %d is not after the epoch's %d", ErrTokenRegressed, createRev, e.rev)
	}
	d := uint64(createRev - e.rev)
	hi := e.rec.Start + d>>32
	if hi >= 1<<32 || int64(hi) > nowSec+clockSkew {
		return 0, fmt.Errorf("%w: high part %d, clock %ds (epoch start %d, %d revisions since)", ErrTokenOverflow, hi, nowSec, e.rec.Start, d)
	}
	return e.rec.Start<<32 + d, nil
}

// createRev is the create revision of the key a token of this epoch names;
// false for a token of another epoch.
func (e *epoch) createRev(tok uint64) (int64, bool) {
	base := e.rec.Start << 32
	if tok <= base || tok-base >= 1<<62 {
		return 0, false
	}
	return e.rev + int64(tok-base), true
}

// gauge is one Status reading of a member: its revision, raft applied
// index and raft committed index.
type gauge struct {
	rev, applied, committed int64
}

// recordGap is the gap an epoch written after this reading records: an
// upper bound of the true gap at every later position of the same raft
// history (the gap never rises along it).
func (g gauge) recordGap() int64 { return g.rev - g.applied }

// restoredSince reports whether the reading shows a raft history other
// than the one ep was written in (ADR 0209). It measures against the
// committed index, which bounds the gap at the member's committed position
// from above whatever the member's apply backlog, so a lagging follower
// never reads as restored; and it decides nothing from a member that has
// not applied the epoch's own write yet.
func (g gauge) restoredSince(ep *epoch) bool {
	return g.rev >= ep.rev && g.rev-g.committed > ep.rec.Gap+gapSlack
}

// gap reads a member's Status over the client's own connection (a
// member-local call: every member applies the same log, so any one will
// do), hedged across members.
func (b *Backend) gap(ctx context.Context) (gauge, error) {
	st, err := hedged(ctx, b.attempts(), func(ctx context.Context) (*pb.StatusResponse, error) {
		return b.maint.Status(ctx, &pb.StatusRequest{})
	})
	if err != nil {
		return gauge{}, fmt.Errorf("status: %w", err)
	}
	if st.Header == nil {
		return gauge{}, fmt.Errorf("status without a header")
	}
	b.sawStatus(st)
	applied := st.RaftAppliedIndex
	if applied == 0 {
		applied = st.RaftIndex // a server before 3.4
	}
	return gauge{rev: st.Header.Revision, applied: int64(applied), committed: int64(max(st.RaftIndex, applied))}, nil
}

// initMode says what loadEpoch does when it finds no epoch, or a lost one.
type initMode int

const (
	openMode  initMode = iota // create one in quarantine (a loss)
	initOnly                  // Init: create one without quarantine if none; refuse on a sign of loss
	forceInit                 // ForceInit: create one without quarantine, whatever the signs
)

// loadEpoch reads the namespace's epoch, checks it against the store's
// history (the gap, and the revisions this process has seen), and creates
// a new one if it is missing or lost. It updates b.ep and b.qEnd and
// returns the epoch.
func (b *Backend) loadEpoch(ctx context.Context, mode initMode) (*epoch, error) {
	for attempt := 0; attempt < 8; attempt++ {
		g, err := b.gap(ctx)
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		floor := b.floor()
		resp, err := b.cli.Txn(ctx).Then(
			clientv3.OpGet(b.k.epoch),
			clientv3.OpGet(b.k.quarantine),
			clientv3.OpGet(b.k.lease, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(b.k.delay, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return nil, err
		}
		b.observe(floor, resp.Header.Revision)
		ekv := firstKV(resp, 0)
		qPresent := firstKV(resp, 1) != nil
		// Lock-delay markers are records of lost terms too (ADR 0256).
		leases := resp.Responses[2].GetResponseRange().Count + resp.Responses[3].GetResponseRange().Count
		var prev *record
		cmp := clientv3.Compare(clientv3.CreateRevision(b.k.epoch), "=", 0)
		reason := "the namespace has no epoch (its records were lost, or it is new and was not initialised)"
		if ekv != nil {
			cmp = clientv3.Compare(clientv3.ModRevision(b.k.epoch), "=", ekv.ModRevision)
			var rec record
			switch {
			case json.Unmarshal(ekv.Value, &rec) != nil || !rec.valid():
				reason = "the epoch record is garbled"
			case g.restoredSince(&epoch{rec: rec, rev: ekv.ModRevision}):
				prev = &rec
				reason = fmt.Sprintf("the store's revision is %d ahead of its raft index, %d more than when the epoch was written: it was restored from a snapshot", g.rev-g.committed, g.rev-g.committed-rec.Gap)
			case b.lostEpoch() == string(ekv.Value) && mode != forceInit:
				prev = &rec
				reason = "this process saw the store's revision go back: it was restored or lost acknowledged writes"
			default:
				if mode == forceInit {
					prev = &rec
					break
				}
				e := &epoch{rec: rec, raw: string(ekv.Value), rev: ekv.ModRevision}
				return b.adopt(e, qPresent, sent), nil
			}
		}
		if mode == initOnly && (ekv != nil || leases > 0) {
			if ekv == nil {
				reason = fmt.Sprintf("the namespace has %d lease or lock-delay keys but no epoch", leases)
			}
			return nil, fmt.Errorf("%w: %s; ForceInit skips the quarantine", driver.ErrInitUnsafe, reason)
		}
		e, ok, err := b.createEpoch(ctx, cmp, prev, resp.Header.Revision, g, mode, reason)
		if err != nil {
			return nil, err
		}
		if ok {
			return e, nil
		}
		// Someone else changed the epoch meanwhile: read theirs.
	}
	return nil, fmt.Errorf("epoch of %s: changed by others at every attempt", b.ns)
}

// adopt makes e the backend's epoch. The same epoch read again keeps its
// quarantine end (a later Open does not restart it); a new one in
// quarantine starts the quarantine from sent, the time the read that first
// saw it was sent, which is after the epoch's creation.
func (b *Backend) adopt(e *epoch, qPresent bool, sent time.Time) *epoch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep != nil && b.ep.raw == e.raw {
		if !qPresent {
			b.qEnd = time.Time{}
		}
		return b.ep
	}
	b.ep, b.qEnd = e, time.Time{}
	if e.rec.QuarantineMS > 0 && qPresent {
		b.qEnd = sent.Add(time.Duration(e.rec.QuarantineMS) * time.Millisecond)
	}
	return e
}

// createEpoch writes a new epoch if cmp still holds. In quarantine (every
// mode but Init and ForceInit) it also puts the quarantine key on an etcd
// lease of the quarantine's length, granted first: the key outlives the
// quarantine on the leader's clock, and processes that find it gone know
// the quarantine is over.
func (b *Backend) createEpoch(ctx context.Context, cmp clientv3.Cmp, prev *record, headRev int64, g gauge, mode initMode, reason string) (*epoch, bool, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, false, err
	}
	now := time.Now()
	q := time.Duration(0)
	if mode == openMode {
		// The delays are lost with the leases: a holder paused across the
		// loss is covered for its lease and its lock-delay.
		q = b.cfg.maxLease + b.cfg.maxLockDelay
	}
	rec := record{Epoch: hex.EncodeToString(raw[:]), Start: uint64(now.Unix()), QuarantineMS: q.Milliseconds(), Gap: g.recordGap()}
	if q > 0 {
		// After a loss the epoch starts at the second its quarantine ends:
		// every earlier token's high part is at most its granter's clock
		// second plus clockSkew, so the new tokens are higher unless that
		// clock was ahead of this one by the quarantine less clockSkew.
		rec.Start = uint64(now.Unix()) + uint64(ceilSeconds(q))
	}
	if prev != nil && prev.valid() && headRev > 0 {
		// And past the lost epoch's tokens as far as this store shows them.
		rec.Start = max(rec.Start, prev.Start+1+uint64(headRev)>>32)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, false, err
	}
	ops := []clientv3.Op{clientv3.OpPut(b.k.epoch, string(data))}
	var qLease clientv3.LeaseID
	if q > 0 {
		gr, err := b.cli.Grant(ctx, ceilSeconds(q))
		if err != nil {
			return nil, false, fmt.Errorf("grant the quarantine's lease: %w", err)
		}
		qLease = gr.ID
		ops = append(ops, clientv3.OpPut(b.k.quarantine, rec.Epoch, clientv3.WithLease(qLease)))
	}
	floor := b.floor()
	resp, err := b.cli.Txn(ctx).If(cmp).Then(ops...).Commit()
	if err != nil {
		if qLease != 0 {
			b.revokeAsync(qLease)
		}
		return nil, false, err
	}
	b.observe(floor, resp.Header.Revision)
	if !resp.Succeeded {
		if qLease != 0 {
			b.revokeAsync(qLease)
		}
		return nil, false, nil
	}
	e := &epoch{rec: rec, raw: string(data), rev: resp.Header.Revision}
	b.mu.Lock()
	b.ep, b.qEnd = e, time.Time{}
	if q > 0 {
		// From before the grant: after the loss was found, so the
		// quarantine covers one MaxLease from the loss at least.
		b.qEnd = now.Add(q)
	}
	b.mu.Unlock()
	if q > 0 {
		b.cfg.logger.Warn("etcdsimba: "+reason+": no lease is granted for one maximum lease",
			"namespace", b.ns, "epoch", rec.Epoch, "quarantine", q)
	} else {
		b.cfg.logger.Info("etcdsimba: namespace initialised", "namespace", b.ns, "epoch", rec.Epoch, "forced", mode == forceInit)
	}
	return e, true, nil
}

// Init creates the namespace's epoch without a quarantine if it has none,
// and changes nothing in a namespace that has a sound one. Call it only
// for a namespace never used: a first deployment, a test. Nothing tells a
// new namespace from one whose records were lost (deleted by prefix, a
// cluster rebuilt from empty disks), so without Init its first use waits
// one MaxLease like after a loss.
//
// Init refuses with an error wrapping [driver.ErrInitUnsafe] when the
// store shows a sign that records were lost: lease keys without an epoch,
// a garbled epoch, or a store restored from a snapshot since the epoch was
// written. [Backend.ForceInit] is for the operator who knows better.
func (b *Backend) Init(ctx context.Context) error {
	if _, err := b.loadEpoch(ctx, initOnly); err != nil {
		return fmt.Errorf("etcdsimba: init %s: %w", b.ns, b.wrapCtx(ctx, err))
	}
	return nil
}

// ForceInit writes a new epoch without a quarantine whatever the store
// shows: for an operator who knows that no process holds or believes in a
// lease of the namespace (every process of it stopped for one MaxLease).
// Running processes' sessions end (their epoch is gone).
func (b *Backend) ForceInit(ctx context.Context) error {
	if _, err := b.loadEpoch(ctx, forceInit); err != nil {
		return fmt.Errorf("etcdsimba: force init %s: %w", b.ns, b.wrapCtx(ctx, err))
	}
	return nil
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
