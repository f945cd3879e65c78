package zksimba

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// The namespace epoch (docs/adr/0138-zk-epoch-tokens.md). The root node's
// data is the epoch record; the empty node <root>/@epoch/<id> is its
// identity: every Acquire and Renew checks that node in the same multi, so
// a root deleted and recreated (by anyone, even an older client that
// recreates it without a record) or an ensemble rebuilt from empty disks
// is seen by every process at its next request. '@' is not a lease-name
// byte, so the nodes never collide with a lease. The identity sits one
// level below the leases, so a recursive delete of the root (zkCli's
// deleteall and rmr delete the deepest level first) removes it before
// any lease node: no lease is deleted while the epoch still stands.

// epochDir is the parent of the epoch's identity node, under the root.
const epochDir = "@epoch"

func identityPath(root, id string) string { return root + "/" + epochDir + "/" + id }

// ErrTokenOverflow is the error of an acquisition whose token would not
// stay below the next epoch's: the token's high part (the epoch's start,
// in seconds, plus one per 2^32 zxids since) would be ahead of the server
// clock, which happens only after more ZooKeeper leader elections than
// seconds since the epoch began, or when the server clock went back. The
// lease is refused (its node deleted); a later attempt succeeds once the
// server clock has caught up.
var ErrTokenOverflow = errors.New("zksimba: token would run ahead of the server clock (too many leader elections since the epoch began, or the server clock went back)")

// maxQuarantineMS bounds the quarantine a record may ask for (about 34
// years), so that the server time plus it cannot overflow. A record above
// it is refused as garbled.
const maxQuarantineMS = 1 << 40

// epochRecord is the root node's data.
type epochRecord struct {
	// Epoch is the identity node's suffix: <root>/@epoch-<Epoch>.
	Epoch string `json:"epoch"`
	// QuarantineMS is the quarantine the creator applied from the identity
	// node's creation: its WithMaxLease after finding the records lost, 0
	// for [Backend.Init].
	QuarantineMS int64 `json:"quarantine_ms"`
	// InitPending marks the quarantined epoch Init makes first and then
	// replaces (or removes, refusing) at once: another Init finding it
	// waits for that outcome instead of reporting a namespace it cannot
	// use yet (ADR 0224). Processes that do not know the field read a
	// quarantined epoch, which it is.
	InitPending bool `json:"init_pending,omitempty"`
}

// epoch is what a session knows of its namespace's epoch. Immutable.
type epoch struct {
	id    string
	path  string // the identity node
	czxid int64  // the identity node's creation zxid: tokens count from it
	ctime int64  // the identity node's creation time, ms on the server clock
	// start is the high part of the epoch's first token, in seconds: the
	// creation second, plus one after a loss so that it is past every
	// token handed out before (those never run ahead of the clock).
	start uint64
	// until is the end of the quarantine, ms on the server clock (0: none).
	until int64
	// initPending and quarantineMS: the record's InitPending and
	// QuarantineMS.
	initPending  bool
	quarantineMS int64
}

func newEpoch(root string, rec epochRecord, st *zk.Stat) (*epoch, error) {
	if st == nil || st.Czxid <= 0 || st.Ctime <= 0 {
		return nil, fmt.Errorf("epoch node of %s: no creation stat", root)
	}
	if rec.QuarantineMS < 0 || rec.QuarantineMS > maxQuarantineMS {
		return nil, fmt.Errorf("epoch record of %s: quarantine %dms is not within [0, %dms]", root, rec.QuarantineMS, int64(maxQuarantineMS))
	}
	e := &epoch{id: rec.Epoch, path: identityPath(root, rec.Epoch), czxid: st.Czxid, ctime: st.Ctime, start: uint64(st.Ctime / 1000), initPending: rec.InitPending, quarantineMS: rec.QuarantineMS}
	if rec.QuarantineMS > 0 {
		// After a loss the epoch starts at the second its quarantine ends
		// (and at least past the creation second). Every earlier token's
		// high part is at most the clock second of the server that granted
		// it (see token), so the new tokens are higher unless that server's
		// clock was ahead of this creator's by a second less than the
		// quarantine or more. Starting at the creation second would
		// tolerate only about one second of skew, or less right after a
		// young epoch. The quarantine also lasts until the second of
		// start: before it, a token would run ahead of the clock.
		e.start = max(uint64(st.Ctime/1000)+1, uint64((st.Ctime+rec.QuarantineMS)/1000))
		e.until = max(st.Ctime+rec.QuarantineMS, int64(e.start)*1000)
	}
	if e.start >= 1<<32 {
		return nil, fmt.Errorf("epoch of %s: creation time %dms is past what a 64-bit token holds (year 2106)", root, st.Ctime)
	}
	return e, nil
}

// token maps a lease node's stat to its fencing token:
//
//	start<<32 + (czxid − epoch czxid)
//
// Strictly increasing with czxid within the epoch, and above every token
// of every earlier epoch (start is past their high parts, which never run
// ahead of the server clock: checked here). Tokens of the scheme before
// epochs (the raw czxid, below 2^32 × the ensemble's leader epoch) are all
// lower. A node from before the epoch, or a token that would run ahead of
// the clock, is an error.
func (e *epoch) token(st *zk.Stat) (uint64, error) {
	if st.Czxid <= e.czxid {
		return 0, fmt.Errorf("%w: node czxid %#x is not after the epoch's %#x", ErrTokenRegressed, st.Czxid, e.czxid)
	}
	d := uint64(st.Czxid - e.czxid)
	hi := e.start + d>>32
	if hi >= 1<<32 || int64(hi) > st.Ctime/1000 {
		return 0, fmt.Errorf("%w: high part %d, server clock %ds (epoch start %d, %d zxids since)", ErrTokenOverflow, hi, st.Ctime/1000, e.start, d)
	}
	return e.start<<32 + d, nil
}

// of maps a czxid to its token without the checks of token: for
// comparing a node read back with a token handed out. 0 for a node from
// before the epoch.
func (e *epoch) of(czxid int64) uint64 {
	if czxid <= e.czxid {
		return 0
	}
	return e.start<<32 + uint64(czxid-e.czxid)
}

// quarantined is how long the quarantine lasts after the server time
// nowMS (ms), or 0.
func (e *epoch) quarantined(nowMS int64) time.Duration {
	if nowMS >= e.until {
		return 0
	}
	return time.Duration(e.until-nowMS) * time.Millisecond
}

// noCreate as loadEpoch's quarantine reads the epoch without creating one
// (nil when there is none).
const noCreate = time.Duration(-1)

// loadEpoch reads the namespace's epoch over conn, creating the root (and
// its parents) and the epoch if missing. A missing epoch is created with
// a quarantine of quarantine (the backend's MaxLease): nothing tells a
// namespace never used from one whose records were lost.
func (b *Backend) loadEpoch(ctx context.Context, conn *zk.Conn, quarantine time.Duration) (*epoch, error) {
	e, _, err := b.loadEpochStat(ctx, conn, quarantine)
	return e, err
}

// loadEpochStat is loadEpoch that also returns the root's stat as read
// with the record when it finds the epoch, or finds none under noCreate
// (nil: no root). After creating an epoch it returns no stat.
func (b *Backend) loadEpochStat(ctx context.Context, conn *zk.Conn, quarantine time.Duration) (*epoch, *zk.Stat, error) {
	if quarantine != noCreate {
		if err := b.checkAncestors(ctx, conn); err != nil {
			return nil, nil, err
		}
	}
	for attempt := 0; attempt < 8; attempt++ {
		type got struct {
			data []byte
			st   *zk.Stat
		}
		r, err := call(ctx, b, func() (got, error) {
			data, st, err := conn.Get(b.root)
			return got{data, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			if quarantine == noCreate {
				return nil, nil, nil
			}
			e, err := b.createEpoch(ctx, conn, -1, quarantine, false)
			if changedMeanwhile(err) {
				continue // someone else was first: read theirs
			}
			if err == nil {
				b.logQuarantine(e, quarantine)
			}
			return e, nil, err
		}
		if err != nil {
			return nil, nil, err
		}
		var rec epochRecord
		if json.Unmarshal(r.data, &rec) == nil && validEpochID(rec.Epoch) {
			st, err := call(ctx, b, func() (*zk.Stat, error) {
				ok, st, err := conn.Exists(identityPath(b.root, rec.Epoch))
				if err == nil && !ok {
					st = nil
				}
				return st, err
			})
			if err != nil {
				return nil, nil, err
			}
			if st != nil {
				e, err := newEpoch(b.root, rec, st)
				return e, r.st, err
			}
		}
		// A root without a valid epoch: created by a client from before
		// epochs (which recreates a deleted root silently), or its identity
		// node deleted. Its records may have been lost: a new epoch, in
		// quarantine, replaces the record if nobody changed it meanwhile.
		if quarantine == noCreate {
			return nil, r.st, nil
		}
		e, err := b.createEpoch(ctx, conn, r.st.Version, quarantine, false)
		if changedMeanwhile(err) {
			continue
		}
		if err == nil {
			b.logQuarantine(e, quarantine)
		}
		return e, nil, err
	}
	return nil, nil, fmt.Errorf("epoch of %s: changed by others at every attempt", b.root)
}

// createEpoch creates a new epoch in one multi: the root with the record
// (rootVersion -1) or the record set on the existing root at rootVersion
// (deleting any other identity node, so that no session of an older epoch
// passes its check), and the identity node, whose stat the trailing
// setData returns.
func (b *Backend) createEpoch(ctx context.Context, conn *zk.Conn, rootVersion int32, quarantine time.Duration, initPending bool) (*epoch, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	rec := epochRecord{Epoch: hex.EncodeToString(raw[:]), QuarantineMS: quarantine.Milliseconds(), InitPending: initPending}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	path := identityPath(b.root, rec.Epoch)
	dir := b.root + "/" + epochDir
	acl := b.cfg.acl
	st, err := call(ctx, b, func() (*zk.Stat, error) {
		var ops []any
		mkdir := true
		if rootVersion < 0 {
			// Parents are shared by other namespaces: open to all, created
			// one by one (a parent that exists is fine).
			for _, p := range parents(b.root) {
				if p == b.root {
					break
				}
				if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return nil, fmt.Errorf("create namespace node %s: %w", p, err)
				}
			}
			ops = append(ops, &zk.CreateRequest{Path: b.root, Data: data, Acl: acl},
				&zk.CreateRequest{Path: b.root + "/" + delayDir, Acl: acl})
		} else {
			if err := b.checkTakeover(conn, rootVersion); err != nil {
				return nil, err
			}
			ops = append(ops, &zk.SetDataRequest{Path: b.root, Data: data, Version: rootVersion})
			old, _, err := conn.Children(dir)
			switch {
			case errors.Is(err, zk.ErrNoNode):
			case err != nil:
				return nil, err
			default:
				mkdir = false
				for _, o := range old {
					ops = append(ops, &zk.DeleteRequest{Path: dir + "/" + o, Version: -1})
				}
			}
		}
		if mkdir {
			ops = append(ops, &zk.CreateRequest{Path: dir, Acl: acl})
		}
		ops = append(ops,
			&zk.CreateRequest{Path: path, Acl: acl},
			&zk.SetDataRequest{Path: path, Version: 0})
		res, err := conn.Multi(ops...)
		if err != nil {
			return nil, err
		}
		if len(res) != len(ops) || res[len(res)-1].Stat == nil {
			return nil, fmt.Errorf("create epoch %s: multi answered %d results without a stat", path, len(res))
		}
		return res[len(res)-1].Stat, nil
	})
	if err != nil {
		return nil, err
	}
	return newEpoch(b.root, rec, st)
}

// logQuarantine reports an epoch created after finding none.
func (b *Backend) logQuarantine(e *epoch, quarantine time.Duration) {
	b.cfg.logger.Warn("zksimba: namespace has no epoch (its records were lost, or it is new and was not initialised): no lease is granted for one maximum lease",
		"root", b.root, "epoch", e.id, "quarantine", quarantine)
}

// ErrOverlappingNamespace is the error of Open and Init for a namespace
// root inside another namespace, or over one (its root or a parent of its
// root inside this one), or over a node Simba did not create. Lease nodes
// are the root's children, so one namespace inside another would take
// names of the other's leases and read as held forever
// (docs/adr/0178-zk-overlapping-namespaces.md).
var ErrOverlappingNamespace = errors.New("zksimba: namespaces overlap")

// checkAncestors refuses a root inside another namespace: one of its
// ancestors has an epoch directory, the mark of every namespace root.
func (b *Backend) checkAncestors(ctx context.Context, conn *zk.Conn) error {
	for _, p := range parents(b.root) {
		if p == b.root {
			break
		}
		marked, err := call(ctx, b, func() (bool, error) {
			ok, _, err := conn.Exists(p + "/" + epochDir)
			return ok, err
		})
		if err != nil {
			return err
		}
		if marked {
			return fmt.Errorf("%w: %s is inside the namespace %s (which has %s/%s): its lease nodes would collide with that namespace's; pick roots side by side, such as /simba/app and /simba/jobs", ErrOverlappingNamespace, b.root, p, p, epochDir)
		}
	}
	return nil
}

// maxTakeoverProbes bounds the children checkTakeover reads one by one:
// a root of the scheme before epochs may hold thousands of leases.
const maxTakeoverProbes = 1024

// checkTakeover refuses to write an epoch record into an existing root
// without a valid one unless it looks like a namespace Simba made: its
// children are lease nodes (ephemeral) and the epoch directory, and it
// has the directory or no data of its own. A persistent child is another
// namespace's root or a parent of one, or an application's node; data
// without a directory is an application's. Simba never writes into a
// node it did not create.
func (b *Backend) checkTakeover(conn *zk.Conn, rootVersion int32) error {
	data, st, err := conn.Get(b.root)
	if err != nil {
		return err
	}
	if st.Version != rootVersion {
		return zk.ErrBadVersion // changed since read: read again
	}
	children, _, err := conn.Children(b.root)
	if err != nil {
		return err
	}
	hasDir, probes := false, 0
	for _, c := range children {
		if c == epochDir {
			hasDir = true
			continue
		}
		if c == delayDir {
			continue // the lock-delay markers' directory: Simba's
		}
		if probes++; probes > maxTakeoverProbes {
			continue // past the bound: Acquire's ErrNotALease is the backstop
		}
		ok, cst, err := conn.Exists(b.root + "/" + c)
		if err != nil {
			return err
		}
		if ok && cst.EphemeralOwner == 0 {
			return fmt.Errorf("%w: %s holds %s/%s, a persistent node and no lease (another namespace's root or a parent of one, or an application's node): a namespace root holds only Simba's nodes; pick a root of its own", ErrOverlappingNamespace, b.root, b.root, c)
		}
	}
	if !hasDir && len(data) > 0 {
		return fmt.Errorf("%w: %s has data that is no Simba epoch record, and no %s: a node Simba did not create; pick a root of its own", ErrOverlappingNamespace, b.root, epochDir)
	}
	return nil
}

// changedMeanwhile reports whether an epoch creation failed because
// someone else changed the namespace between the read and the multi: read
// again.
func changedMeanwhile(err error) bool {
	return errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode)
}

func validEpochID(id string) bool {
	if len(id) != 16 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// initQuarantineMS is the quarantine an Init epoch records: 1 ms. Every
// version of newEpoch reads any quarantine as "start past the creation
// second, grant nothing before it", so an Init epoch's tokens are above
// every token of an epoch lost in the same second, whose high parts never
// ran ahead of the server clock (ADR 0179). Records of 0 (Init epochs
// before this rule) keep their old start, so their tokens do not change.
const initQuarantineMS = 1

// Init creates the namespace root and its epoch without a quarantine, if
// the namespace has no epoch yet; it changes nothing in a namespace that
// has one. It is for a namespace never used (a first deployment): nothing
// tells a new namespace from one whose records were lost, so without Init
// the first use waits one MaxLease, as after a loss.
//
// Init refuses, with an error wrapping [driver.ErrInitUnsafe] that says
// why, where the ensemble shows a sign that records were lost within one
// MaxLease: the root holds records of an epoch that is gone (lease nodes,
// an epoch directory), or the ensemble holds no node older than MaxLease
// (a new ensemble, or one rebuilt from empty disks: its zxids began
// within one maximum lease). A refused Init leaves nothing behind (on a
// root that existed before it, the quarantine any first use would start,
// from the refusal), so a deploy job may run Init every time. [Backend.ForceInit] skips these checks.
// Not detected: the root deleted by hand (deleteall) in an ensemble that
// keeps older nodes: after that, start without Init.
//
// The first token of an Init epoch is past the epoch's creation second
// (above any token of a lost epoch, whatever Init or ForceInit was told):
// Init returns once the server clock has reached it (at most a second),
// so an Acquire right after it is granted.
func (b *Backend) Init(ctx context.Context) error { return b.initNamespace(ctx, false) }

// ForceInit is [Backend.Init] without its checks for signs of lost
// records: for the operator who knows that no process used the namespace
// within one MaxLease (a new ensemble, a namespace deleted long ago). It
// still refuses overlapping namespaces, and its epoch's tokens are above
// every earlier token like every epoch's. `simba init --force` calls it.
func (b *Backend) ForceInit(ctx context.Context) error { return b.initNamespace(ctx, true) }

func (b *Backend) initNamespace(ctx context.Context, force bool) error {
	conn, done, err := b.dialRead(ctx, nil)
	if err != nil {
		return fmt.Errorf("zksimba: init %s: %w", b.root, err)
	}
	defer done()
	e, made, err := b.initOrAwait(ctx, conn, force)
	if err != nil {
		if errors.Is(err, zk.ErrNoAuth) {
			err = fmt.Errorf("%w (%w)", ErrNotAuthorized, err)
		}
		return fmt.Errorf("zksimba: init %s: %w", b.root, err)
	}
	if e == nil {
		return nil
	}
	if made {
		b.cfg.logger.Info("zksimba: namespace initialised", "root", b.root, "epoch", e.id, "forced", force)
	}
	// Until the first token second, grants answer a quarantine: wait it
	// out here (the server's time since the epoch's creation is at most
	// the local time since its reply).
	t := time.NewTimer(time.Duration(e.until-e.ctime)*time.Millisecond + 5*time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("zksimba: init %s: waiting for the epoch's first token second: %w", b.root, context.Cause(ctx))
	}
}

// maxInitAwait bounds how long Init waits for another Init's pending
// epoch to be replaced or removed: normally milliseconds (an Init's age
// check is at most about 80 reads); past it the other Init is taken for
// dead (its connection lost halfway), its mark is cleared, so that no
// later Init waits for it again, and its epoch is the quarantine it is.
const maxInitAwait = 5 * time.Second

// initOrAwait runs initEpoch, and when another Init is halfway (its
// pending epoch stands, or it changed the namespace under this one),
// waits for its outcome: its Init epoch (returned with made false, for
// the wait of its first token second), or its refusal (then this Init
// runs again, and refuses too). Before ADR 0224 every Init but the first
// of several run at once returned at once, and their processes' first
// Acquire got a quarantine of MaxLease (ADR 0224).
func (b *Backend) initOrAwait(ctx context.Context, conn *zk.Conn, force bool) (*epoch, bool, error) {
	end := time.Now().Add(maxInitAwait)
	for {
		e, busy, err := b.initEpoch(ctx, conn, force)
		if err != nil || e != nil || !busy {
			return e, e != nil, err
		}
		// Another Init is halfway: wait for its outcome.
		for {
			if !time.Now().Before(end) {
				// The other Init is gone: its epoch is a quarantine.
				if cur, st, err := b.loadEpochStat(ctx, conn, noCreate); err == nil && cur != nil && cur.initPending && st != nil {
					b.settlePending(ctx, conn, cur, st.Version)
				}
				return nil, false, nil
			}
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, false, fmt.Errorf("waiting for another Init of the namespace: %w", context.Cause(ctx))
			}
			cur, _, err := b.loadEpochStat(ctx, conn, noCreate)
			if err != nil {
				return nil, false, err
			}
			if cur == nil {
				break // removed (that Init refused): try again, and refuse too
			}
			if cur.initPending {
				continue
			}
			if cur.until-cur.ctime <= 1000 {
				return cur, false, nil // its Init epoch: wait for its first token second
			}
			return nil, false, nil // a first use's quarantine
		}
	}
}

// initEpoch creates an Init epoch and returns it, or nil when it made
// none: the namespace has an epoch already, or (busy) another Init's
// pending epoch stands or another creator changed the namespace under
// this one.
func (b *Backend) initEpoch(ctx context.Context, conn *zk.Conn, force bool) (e *epoch, busy bool, err error) {
	e, busy, err = b.initEpochOnce(ctx, conn, force)
	return e, busy || errors.Is(err, errChangedMeanwhile), dropChanged(err)
}

// errChangedMeanwhile is initEpochOnce's answer when another creator
// changed the namespace under it.
var errChangedMeanwhile = errors.New("zksimba: namespace changed meanwhile")

func dropChanged(err error) error {
	if errors.Is(err, errChangedMeanwhile) {
		return nil
	}
	return err
}

func (b *Backend) initEpochOnce(ctx context.Context, conn *zk.Conn, force bool) (*epoch, bool, error) {
	if err := b.checkAncestors(ctx, conn); err != nil {
		return nil, false, err
	}
	e, st, err := b.loadEpochStat(ctx, conn, noCreate)
	if err != nil || e != nil {
		return nil, e != nil && e.initPending, err
	}
	version := int32(-1)
	if st != nil {
		// A root without a valid epoch.
		version = st.Version
		// Overlap first: a root that is not Simba's is refused as such,
		// forced or not.
		if _, err := call(ctx, b, func() (struct{}, error) { return struct{}{}, b.checkTakeover(conn, version) }); err != nil {
			if changedMeanwhile(err) {
				return nil, false, errChangedMeanwhile
			}
			return nil, false, err
		}
		if !force {
			if err := b.checkNoRecords(ctx, conn); err != nil {
				return nil, false, err
			}
		}
	}
	if force {
		e, err := b.createEpoch(ctx, conn, version, initQuarantineMS*time.Millisecond, false)
		if changedMeanwhile(err) {
			return nil, false, errChangedMeanwhile // another creator was first
		}
		return e, false, err
	}
	// The safe epoch first, the quarantined one any first use makes: its
	// identity node's creation time is the server's time, against which
	// the ensemble's oldest node is measured. Until it is replaced, a
	// session opened on it grants nothing; the replacement (or removal)
	// expires it. It is marked pending, so that another Init waits for
	// this one's outcome.
	q, err := b.createEpoch(ctx, conn, version, b.quarantine(), true)
	if changedMeanwhile(err) {
		return nil, false, errChangedMeanwhile
	}
	if err != nil {
		return nil, false, err
	}
	rootSt, err := call(ctx, b, func() (*zk.Stat, error) {
		data, st, err := conn.Get(b.root)
		var rec epochRecord
		if err == nil && (json.Unmarshal(data, &rec) != nil || rec.Epoch != q.id) {
			return nil, errChangedMeanwhile // replaced meanwhile
		}
		return st, err
	})
	if err != nil {
		return nil, false, err
	}
	if rootSt == nil {
		return nil, false, errChangedMeanwhile
	}
	why, err := b.ensembleTooYoung(ctx, conn, q.ctime)
	if err != nil {
		b.settlePending(ctx, conn, q, rootSt.Version)
		return nil, false, err // the quarantined epoch stands
	}
	if why != nil {
		if version < 0 && b.removeEpoch(ctx, conn, q, rootSt.Version) == nil {
			return nil, false, fmt.Errorf("%w: %w: nothing was created; without Init, the first use is quarantined for %v; if the ensemble is new and nobody used the namespace, ForceInit (simba init --force) skips the wait",
				driver.ErrInitUnsafe, why, b.quarantine())
		}
		b.settlePending(ctx, conn, q, rootSt.Version)
		b.logQuarantine(q, b.quarantine())
		return nil, false, fmt.Errorf("%w: %w: %s is quarantined for %v from now, as at any first use",
			driver.ErrInitUnsafe, why, b.root, b.quarantine())
	}
	e, err = b.createEpoch(ctx, conn, rootSt.Version, initQuarantineMS*time.Millisecond, false)
	if changedMeanwhile(err) {
		return nil, false, errChangedMeanwhile
	}
	return e, false, err
}

// settlePending clears the pending mark of Init's quarantined epoch q
// that stays (Init refused, or failed, on a root it could not remove, or
// an Init that waited maxInitAwait for a dead one), rewriting the record
// as it was otherwise, at rootVersion, so that no other Init waits for
// it. Best effort: a mark left (the server gone meanwhile) costs the next
// Init maxInitAwait, which then clears it.
func (b *Backend) settlePending(ctx context.Context, conn *zk.Conn, q *epoch, rootVersion int32) {
	data, err := json.Marshal(epochRecord{Epoch: q.id, QuarantineMS: q.quarantineMS})
	if err != nil {
		return
	}
	_, _ = call(ctx, b, func() (*zk.Stat, error) { return conn.Set(b.root, data, rootVersion) })
}

// checkNoRecords refuses Init on an existing root without a valid epoch
// that holds records: lease nodes of a lost epoch's sessions, or the epoch
// directory (the record garbled, or the identity node deleted).
func (b *Backend) checkNoRecords(ctx context.Context, conn *zk.Conn) error {
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := conn.Children(b.root)
		return c, err
	})
	if err != nil {
		return err
	}
	if len(children) > 0 {
		return fmt.Errorf("%w: %s has no valid epoch but holds %s/%s (records of an epoch that is gone): a holder of it may still believe in its term; open it without Init (the backend quarantines it for %v), or ForceInit if no process used it within %v",
			driver.ErrInitUnsafe, b.root, b.root, children[0], b.quarantine(), b.cfg.maxLease)
	}
	return nil
}

// maxAgeProbes bounds the top-level nodes checkEnsembleAge reads.
const maxAgeProbes = 64

// ensembleTooYoung says why Init must refuse unless the ensemble holds a
// node created at least MaxLease + MaxLockDelay (the quarantine Init
// spares) before nowMS (server clock): proof that its data was not rebuilt
// from empty disks within that time, since such a node would not have
// survived; a holder paused across such a loss is covered for its lease
// and the lock-delay its term asked for. The root's ancestors are
// tried first, then the children of /.
func (b *Backend) ensembleTooYoung(ctx context.Context, conn *zk.Conn, nowMS int64) (why, err error) {
	cutoff := nowMS - b.quarantine().Milliseconds()
	old := func(path string) (bool, error) {
		return call(ctx, b, func() (bool, error) {
			ok, st, err := conn.Exists(path)
			return ok && st.Ctime > 0 && st.Ctime <= cutoff, err
		})
	}
	paths := parents(b.root)
	paths = paths[:len(paths)-1]
	top, err := call(ctx, b, func() ([]string, error) {
		c, _, err := conn.Children("/")
		return c, err
	})
	if err != nil && !errors.Is(err, zk.ErrNoAuth) {
		return nil, fmt.Errorf("listing /: %w", err)
	}
	for _, c := range top {
		if c != "zookeeper" && len(paths) < maxAgeProbes {
			paths = append(paths, "/"+c)
		}
	}
	for _, p := range paths {
		ok, err := old(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		if ok {
			return nil, nil
		}
	}
	return fmt.Errorf("the ensemble holds no node older than MaxLease + MaxLockDelay (%v): it is new, or was rebuilt from empty disks within that time, and records lost then would not show", b.quarantine()), nil
}

// removeEpoch deletes the epoch q that Init created with the root, in one
// multi at the versions Init left, so that a refused Init leaves nothing
// behind. It fails (and leaves a valid quarantined epoch) if anyone
// changed the namespace meanwhile.
func (b *Backend) removeEpoch(ctx context.Context, conn *zk.Conn, q *epoch, rootVersion int32) error {
	_, err := call(ctx, b, func() ([]zk.MultiResponse, error) {
		return conn.Multi(
			&zk.DeleteRequest{Path: q.path, Version: -1},
			&zk.DeleteRequest{Path: b.root + "/" + epochDir, Version: -1},
			&zk.DeleteRequest{Path: b.root + "/" + delayDir, Version: -1},
			&zk.DeleteRequest{Path: b.root, Version: rootVersion})
	})
	return err
}
