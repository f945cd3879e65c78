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
}

func newEpoch(root string, rec epochRecord, st *zk.Stat) (*epoch, error) {
	if st == nil || st.Czxid <= 0 || st.Ctime <= 0 {
		return nil, fmt.Errorf("epoch node of %s: no creation stat", root)
	}
	if rec.QuarantineMS < 0 || rec.QuarantineMS > maxQuarantineMS {
		return nil, fmt.Errorf("epoch record of %s: quarantine %dms is not within [0, %dms]", root, rec.QuarantineMS, int64(maxQuarantineMS))
	}
	e := &epoch{id: rec.Epoch, path: identityPath(root, rec.Epoch), czxid: st.Czxid, ctime: st.Ctime, start: uint64(st.Ctime / 1000)}
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
// a quarantine of quarantine (the backend's MaxLease; 0 only from Init):
// nothing tells a namespace never used from one whose records were lost.
func (b *Backend) loadEpoch(ctx context.Context, conn *zk.Conn, quarantine time.Duration) (*epoch, error) {
	e, _, err := b.loadEpochStat(ctx, conn, quarantine)
	return e, err
}

// loadEpochStat is loadEpoch that also returns the root's stat as read
// with the record when it finds the epoch, or finds none under noCreate
// (nil: no root). After creating an epoch it returns no stat.
func (b *Backend) loadEpochStat(ctx context.Context, conn *zk.Conn, quarantine time.Duration) (*epoch, *zk.Stat, error) {
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
			e, err := b.createEpoch(ctx, conn, -1, quarantine)
			if changedMeanwhile(err) {
				continue // someone else was first: read theirs
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
		e, err := b.createEpoch(ctx, conn, r.st.Version, quarantine)
		if changedMeanwhile(err) {
			continue
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
func (b *Backend) createEpoch(ctx context.Context, conn *zk.Conn, rootVersion int32, quarantine time.Duration) (*epoch, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	rec := epochRecord{Epoch: hex.EncodeToString(raw[:]), QuarantineMS: quarantine.Milliseconds()}
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
			ops = append(ops, &zk.CreateRequest{Path: b.root, Data: data, Acl: acl})
		} else {
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
	e, err := newEpoch(b.root, rec, st)
	if err == nil {
		if quarantine > 0 {
			b.cfg.logger.Warn("zksimba: namespace has no epoch (its records were lost, or it is new and was not initialised): no lease is granted for one maximum lease",
				"root", b.root, "epoch", rec.Epoch, "quarantine", quarantine)
		} else {
			b.cfg.logger.Info("zksimba: namespace initialised", "root", b.root, "epoch", rec.Epoch)
		}
	}
	return e, err
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

// Init creates the namespace root and its epoch without a quarantine, if
// the namespace has no epoch yet; it changes nothing in a namespace that
// has one. Call it only for a namespace that was never used: a first
// deployment, a test. Nothing tells a new namespace from one whose records
// were lost (its root deleted, the ensemble rebuilt from empty disks), so
// without Init the first use waits one MaxLease like after a loss; and Init
// on a namespace whose records were lost skips that quarantine, letting a
// new term begin while a holder from before the loss may still believe in
// its own (docs/adr/0130-quarantine-after-data-loss.md).
func (b *Backend) Init(ctx context.Context) error {
	conn, done, err := b.dialRead(ctx, nil)
	if err != nil {
		return fmt.Errorf("zksimba: init %s: %w", b.root, err)
	}
	defer done()
	if _, err := b.loadEpoch(ctx, conn, 0); err != nil {
		if errors.Is(err, zk.ErrNoAuth) {
			err = fmt.Errorf("%w (%w)", ErrNotAuthorized, err)
		}
		return fmt.Errorf("zksimba: init %s: %w", b.root, err)
	}
	return nil
}
