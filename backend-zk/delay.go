package zksimba

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// Lock-delay (docs/adr/0257-zk-lock-delay.md). A term granted with a delay
// d > 0 creates, in its granting multi, the persistent marker
// <root>/@delay/<name> holding d; every grant's multi requires the marker
// absent (a grant without a delay creates and deletes it in the same
// multi). A release deletes the lease node and the marker in one multi,
// and Close releases the session's marked names before ending the
// session, so neither leaves a delay. A term that ends otherwise (its
// session expired, its node deleted by an operator) leaves the marker
// without the lease node. The first candidate to find that state writes
// the marker "seen", in a multi that also requires the lease node absent:
// that write's mtime is the ZooKeeper leader's clock at (after) the
// term's end. A later candidate learns the server's time from its own
// lease node's ctime (created in a multi that checks the marker
// unchanged): before mtime + d the node is deleted and the name refused;
// after it, a second multi (its node still there, the marker unchanged)
// deletes the marker, or replaces it by the new term's own. Nothing of the
// name is left after that.

// delayDir is the parent of the markers, under the root: '@' is not a
// lease-name byte, so it never collides with a lease.
const delayDir = "@delay"

func (b *Backend) markerPath(name string) string { return b.root + "/" + delayDir + "/" + name }

// marker is a marker node's data.
type marker struct {
	DelayMS int64     `json:"delay_ms"`
	Session driver.ID `json:"session,omitempty"`
	// Seen: a candidate found the term ended; the write that set it is the
	// node's mtime, from which the delay counts.
	Seen bool `json:"seen,omitempty"`
}

func markerData(d time.Duration, id driver.ID) []byte {
	v, _ := json.Marshal(marker{DelayMS: d.Milliseconds(), Session: id})
	return v
}

// readMarker parses a marker. A garbled one counts as the backend's
// maximum lock-delay (at least a second): a name is never freed early on
// data this backend cannot read.
func (b *Backend) readMarker(data []byte) marker {
	var m marker
	if json.Unmarshal(data, &m) != nil || m.DelayMS <= 0 || m.DelayMS > MaxMaxLockDelay.Milliseconds() {
		m.DelayMS = max(b.cfg.maxLockDelay, time.Second).Milliseconds()
	}
	return m
}

// checkLockDelay refuses a request's lock-delay the backend does not
// honour: the whole request, before anything is written.
func (b *Backend) checkLockDelay(d time.Duration) error {
	if d < 0 || d > b.cfg.maxLockDelay {
		return fmt.Errorf("%w: lock-delay %v is not within [0, %v] (zksimba.WithMaxLockDelay)", driver.ErrLockDelay, d, b.cfg.maxLockDelay)
	}
	return nil
}

// quarantine is how long the backend grants nothing after finding the
// namespace's records lost: its maximum lease plus its maximum
// lock-delay, which the loss took with the leases.
func (b *Backend) quarantine() time.Duration { return b.cfg.maxLease + b.cfg.maxLockDelay }

// maxDelayEstimates bounds the names whose delay end the backend
// estimates (to spare the server a probe per attempt); past it a name is
// probed at every attempt.
const maxDelayEstimates = 4096

// delayPending reports whether name's delay is estimated to last a while
// yet (more than 50 ms) by the server time last seen and the local time
// since; an estimate that has passed is forgotten.
func (b *Backend) delayPending(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	end, ok := b.delayEnds[name]
	if !ok {
		return false
	}
	if time.Until(end) > 50*time.Millisecond {
		return true
	}
	delete(b.delayEnds, name)
	return false
}

// delayLeft records that name's delay has left on the server's clock, as
// of a reply just received: attempts before then are answered without a
// request, and a notice at its end makes waiting candidates try.
func (b *Backend) delayLeft(name string, left time.Duration) {
	b.mu.Lock()
	if _, ok := b.delayEnds[name]; ok || len(b.delayEnds) < maxDelayEstimates {
		b.delayEnds[name] = time.Now().Add(left)
	}
	b.mu.Unlock()
	time.AfterFunc(left, func() { b.notify(driver.Notice{Name: name}) })
}

func (b *Backend) forgetDelay(name string) {
	b.mu.Lock()
	delete(b.delayEnds, name)
	b.mu.Unlock()
}

// ensureDelayDir creates <root>/@delay if missing (a namespace made before
// lock-delays, or the directory deleted).
func (s *zsession) ensureDelayDir(ctx context.Context) error {
	conn, acl := s.conn.Load(), s.b.cfg.acl
	_, err := call(ctx, s.b, func() (string, error) {
		return conn.Create(s.b.root+"/"+delayDir, nil, 0, acl)
	})
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return s.classify(err)
}

// multiFailure is a failed multi's first failing operation.
type multiFailure struct {
	op  int
	err error
}

func (m *multiFailure) Error() string { return fmt.Sprintf("op %d: %v", m.op, m.err) }
func (m *multiFailure) Unwrap() error { return m.err }

// runMulti sends ops and returns their results, or a *multiFailure naming
// the first failing op (ZooKeeper answers the ops before it OK and those
// after it with a runtime inconsistency), or the request's error.
func (s *zsession) runMulti(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	conn := s.conn.Load()
	return call(ctx, s.b, func() ([]zk.MultiResponse, error) {
		res, err := conn.Multi(ops...)
		for i, r := range res {
			if r.Error != nil {
				return nil, &multiFailure{op: i, err: r.Error}
			}
		}
		if err != nil {
			return nil, err
		}
		if len(res) != len(ops) {
			return nil, fmt.Errorf("multi answered %d results for %d ops", len(res), len(ops))
		}
		return res, nil
	})
}

func failedOp(err error) int {
	var m *multiFailure
	if errors.As(err, &m) {
		return m.op
	}
	return -1
}

// afterEnd handles a name whose lease node is gone while its marker
// stands: the term ended without a release. It answers held (token 0)
// while the delay lasts, or the new term once it has passed; again: the
// state changed under it, try the name again.
//
// sweep: no term is wanted; once the delay has passed, the marker and the
// probing node are deleted together, and errSwept says the name is clean
// (also when the marker is already gone).
func (s *zsession) afterEnd(ctx context.Context, name string, delay time.Duration, sweep bool) (a acquired, again bool, err error) {
	if s.b.delayPending(name) {
		return acquired{}, false, nil
	}
	path, mpath := s.b.root+"/"+name, s.b.markerPath(name)
	conn, sid, acl, data := s.conn.Load(), s.sid.Load(), s.b.cfg.acl, s.data
	type got struct {
		data []byte
		st   *zk.Stat
	}
	r, err := call(ctx, s.b, func() (got, error) {
		d, st, err := conn.Get(mpath)
		return got{d, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		if sweep {
			return acquired{}, false, errSwept
		}
		return acquired{}, true, nil
	}
	if err != nil {
		return acquired{}, false, s.classify(err)
	}
	m := s.b.readMarker(r.data)
	d := time.Duration(m.DelayMS) * time.Millisecond
	epochOK := &zk.CheckVersionRequest{Path: s.ep.path, Version: -1}
	if !m.Seen {
		// The first to find the end: write it down, on the leader's clock,
		// if the lease node is still absent and the marker unchanged.
		m.Seen = true
		seen, _ := json.Marshal(m)
		res, err := s.runMulti(ctx, epochOK,
			&zk.CreateRequest{Path: path, Acl: acl, Flags: zk.FlagEphemeral},
			&zk.DeleteRequest{Path: path, Version: 0},
			&zk.SetDataRequest{Path: mpath, Data: seen, Version: r.st.Version})
		switch {
		case err == nil:
			s.b.cfg.logger.Debug("zksimba: lock-delay started", "name", name, "delay", d, "server_ms", res[3].Stat.Mtime)
			s.b.delayLeft(name, d)
			return acquired{}, false, nil
		case failedOp(err) == 0 && errors.Is(err, zk.ErrNoNode):
			return acquired{}, false, s.epochGone()
		case sweep && errors.Is(err, zk.ErrNodeExists):
			return acquired{}, false, errSwept // taken: its holder's business now
		case failedOp(err) > 0:
			return acquired{}, true, nil // taken, or the marker changed
		default:
			return acquired{}, false, s.classify(err)
		}
	}
	// Seen at r.st.Mtime: learn the server's time now from a lease node of
	// ours, made only if the marker is still the one read.
	res, err := s.runMulti(ctx, epochOK,
		&zk.CheckVersionRequest{Path: mpath, Version: r.st.Version},
		&zk.CreateRequest{Path: path, Data: data, Acl: acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: path, Data: data, Version: 0})
	switch {
	case err == nil:
	case failedOp(err) == 0 && errors.Is(err, zk.ErrNoNode):
		return acquired{}, false, s.epochGone()
	case failedOp(err) == 2 && errors.Is(err, zk.ErrNodeExists):
		if sweep {
			return acquired{}, false, errSwept
		}
		return acquired{}, false, nil // taken meanwhile: held
	case failedOp(err) > 0:
		return acquired{}, true, nil
	default:
		// The probe may stand (a lost reply): the next renewal settles
		// it (resolve, foundOwn), or it would hold the name for the
		// session's life when nobody here asks for the name again.
		s.mu.Lock()
		s.uncertain[name] = struct{}{}
		s.mu.Unlock()
		return acquired{}, false, s.classify(err)
	}
	st := res[3].Stat
	if st == nil || st.EphemeralOwner != sid {
		return acquired{}, false, fmt.Errorf("create %s: node not owned by this session", path)
	}
	if left := time.Duration(r.st.Mtime+m.DelayMS-st.Ctime) * time.Millisecond; left > 0 {
		if err := s.drop(ctx, name, st, false); err != nil {
			return acquired{}, false, err
		}
		s.b.delayLeft(name, left)
		return acquired{}, false, nil
	}
	if sweep {
		// Passed, and nobody wants the name: the marker and the probe go.
		if _, err := s.runMulti(ctx, &zk.DeleteRequest{Path: mpath, Version: r.st.Version}, &zk.DeleteRequest{Path: path, Version: st.Version}); err != nil {
			if derr := s.drop(ctx, name, st, false); derr != nil {
				return acquired{}, false, derr
			}
			return acquired{}, true, nil
		}
		s.b.forgetDelay(name)
		return acquired{}, false, errSwept
	}
	// Passed: the marker goes (or becomes the new term's), if it is still
	// the one read and the node still ours.
	ops := []any{
		&zk.CheckVersionRequest{Path: path, Version: st.Version},
		&zk.DeleteRequest{Path: mpath, Version: r.st.Version},
	}
	if delay > 0 {
		ops = append(ops, &zk.CreateRequest{Path: mpath, Data: markerData(delay, s.id), Acl: acl})
	}
	if _, err := s.runMulti(ctx, ops...); err != nil {
		if derr := s.drop(ctx, name, st, false); derr != nil {
			return acquired{}, false, derr
		}
		if failedOp(err) >= 0 {
			return acquired{}, true, nil
		}
		return acquired{}, false, s.classify(err)
	}
	s.b.forgetDelay(name)
	a, err = s.made(ctx, name, st, delay > 0)
	a.fresh = true
	return a, false, err
}

// foundOwn decides what a lease node of this session's, st, found without
// the reply of the request that made it (a lost reply, a delete that
// failed), is. Two requests make such a node: a grant multi, which
// requires the name's marker absent or creates the term's own, and
// afterEnd's probe, which requires the marker "seen" and is a term only
// once a second multi has deleted or replaced that marker. So a node of
// ours beside a seen marker (or one not this session's) is a probe, never
// a term: made a term here, it would end the lock-delay at the probe's
// time. It is deleted, if the marker is still the one read (a concurrent
// probe of this session's restarts; one that became a term meanwhile
// changed the marker and stays), and the name answered held; the delete
// fires the watch of whoever waits, and the next attempt probes anew.
func (s *zsession) foundOwn(ctx context.Context, name string, st *zk.Stat) (acquired, error) {
	conn, mpath := s.conn.Load(), s.b.markerPath(name)
	type got struct {
		data []byte
		st   *zk.Stat
	}
	r, err := call(ctx, s.b, func() (got, error) {
		d, st, err := conn.Get(mpath)
		return got{d, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return s.made(ctx, name, st, false)
	}
	if err != nil {
		s.mu.Lock()
		s.uncertain[name] = struct{}{} // the next renewal asks again
		s.mu.Unlock()
		return acquired{}, s.classify(err)
	}
	if m := s.b.readMarker(r.data); !m.Seen && m.Session == s.id {
		return s.made(ctx, name, st, true) // the grant's own marker
	}
	_, err = s.runMulti(ctx,
		&zk.CheckVersionRequest{Path: mpath, Version: r.st.Version},
		&zk.DeleteRequest{Path: s.b.root + "/" + name, Version: st.Version})
	if err != nil && failedOp(err) < 0 {
		s.mu.Lock()
		s.uncertain[name] = struct{}{} // the next renewal tries again
		s.mu.Unlock()
		return acquired{}, s.classify(err)
	}
	s.mu.Lock()
	delete(s.uncertain, name)
	s.mu.Unlock()
	return acquired{}, nil
}

// releaseMarked releases the session's names whose terms have a
// lock-delay marker, before the session ends: Close says the holder
// stopped, so it skips the delay like a release. Best effort: a marker
// left (the server unreachable) only delays the name.
func (s *zsession) releaseMarked(ctx context.Context) {
	if s.isGone() {
		return
	}
	s.mu.Lock()
	leases := make([]driver.Lease, 0, len(s.marked))
	for n := range s.marked {
		leases = append(leases, driver.Lease{Name: n, Token: s.owned[n]})
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxInFlight)
	for _, l := range leases {
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			if err := s.release(ctx, l); err != nil {
				s.log.Warn("zksimba: close: the lock-delay marker stays (the name waits out its delay)", "session", s.id, "name", l.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// errSwept is afterEnd's answer in sweep mode once the name's marker is
// gone.
var errSwept = errors.New("zksimba: lock-delay marker swept")

// maxOrphans bounds the names whose markers this Backend's expired
// sessions left, waiting for a sweep.
const maxOrphans = 4096

// orphaned records the marked names of the session s that just expired:
// its terms ended without a release, so their markers stay until a
// candidate asks, or until this Backend's next session sweeps them (once
// their delay has passed). Runs off markExpired (which may hold s.mu).
func (b *Backend) orphaned(s *zsession) {
	b.goTracked(func() {
		s.mu.Lock()
		names := make([]string, 0, len(s.marked))
		for n := range s.marked {
			names = append(names, n)
		}
		s.mu.Unlock()
		b.mu.Lock()
		for _, n := range names {
			if len(b.orphans) < maxOrphans {
				b.orphans[n] = struct{}{}
			}
		}
		b.mu.Unlock()
	})
}

// sweepOrphans runs, on the new session s, the sweep of the markers the
// Backend's expired sessions left (ADR 0257): for each name, the delay is
// started if nobody started it, waited out on the server's clock, and the
// marker deleted, unless a candidate takes the name first. Bounded by
// maxOrphans names; it stops with the session or the Backend.
func (b *Backend) sweepOrphans(s *zsession) {
	b.mu.Lock()
	if len(b.orphans) == 0 {
		b.mu.Unlock()
		return
	}
	names := make([]string, 0, len(b.orphans))
	for n := range b.orphans {
		names = append(names, n)
	}
	clear(b.orphans)
	b.mu.Unlock()
	b.goTracked(func() {
		for _, name := range names {
			for attempt := 0; attempt < 32; attempt++ {
				if b.delayPending(name) {
					if !s.wait(100 * time.Millisecond) {
						return
					}
					attempt--
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, again, err := s.afterEnd(ctx, name, 0, true)
				cancel()
				if errors.Is(err, errSwept) || s.isGone() {
					break
				}
				if err != nil || again {
					if !s.wait(100 * time.Millisecond) {
						return
					}
				}
			}
		}
	})
}

// wait waits d, or returns false at the end of the session or of the
// Backend.
func (s *zsession) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.gone:
		return false
	case <-s.b.quit:
		return false
	}
}
