package etcdsimba

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The early revocation of etcd-io/etcd#15247 (ADR 0290): a leader that
// was stalled longer than a lease finds, when it runs again, every lease
// it saw no keepalive for expired, and proposes their revocation before
// it learns it was deposed; once it is a follower the proposal is
// forwarded to the new leader, which commits it whatever the lease's
// keepalives through it. A holder whose last renewal the new leader
// answered a moment before believes in its term for up to a lease more.
// etcd 3.4.31 and 3.5.13 drop a revocation the proposer cannot confirm as
// leader by a quorum read. 3.5.16 (and 3.6, 3.7; in 3.4 the backport
// after 3.4.33) skips that read for a member that has ticked in its last
// three ticks, which a whole process paused and resumed (SIGSTOP, a frozen
// VM) has, a moment after it runs again: on 3.5.17 the revocation passed
// in 2 of 10 stalls (ADR 0320). Every other server needs the revoke
// guard, which is on by default until every member is proven to run a
// fixed version (ADR 0305).

// revokesEarly reports whether an etcd server of version v (as its Status
// reports it, "3.4.23") may commit a deposed leader's revocations: every
// version but 3.4.31-3.4.33 and 3.5.13-3.5.15, the releases whose check of
// leadership before an expiry's revocation asks a quorum every time. A
// version this backend cannot read, or one released later, counts as
// affected: none is known to close the hole again.
func revokesEarly(v string) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 3 {
		return true
	}
	var n [3]int
	for i, p := range parts {
		if j := strings.IndexAny(p, "-+"); j >= 0 && i == 2 {
			p = p[:j]
		}
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return true
		}
		n[i] = x
	}
	switch {
	case n[0] == 3 && n[1] == 4:
		return n[2] < 31 || n[2] > 33
	case n[0] == 3 && n[1] == 5:
		return n[2] < 13 || n[2] > 15
	}
	return true
}

// recheckEvery is how often, at most, a Backend asks the members' versions
// again (from an Open or a Renew): a member replaced by an affected
// version turns the guard back on within about this long even when no
// Status reply of that member came by in between (ADR 0305).
const recheckEvery = time.Minute

// versionTimeout bounds one version check: a member that does not answer
// within it counts as affected.
const versionTimeout = 5 * time.Second

// revokeGuard is what a Backend knows of its members' versions.
type revokeGuard struct {
	// fixed (guardAuto only): the last full check proved every member
	// fixed and no Status reply since showed otherwise. The guard is on
	// while it is false: from New until the first check says otherwise.
	fixed atomic.Bool
	// signs counts the Status replies outside a full check that showed an
	// affected or unknown member (or, while the guard is on, an affected
	// one): a check that started before one of them never turns the guard
	// off.
	signs atomic.Uint64
	// affected is revokesEarly; a test of the guard turning off replaces
	// it, since the machine's servers are all affected.
	affected func(version string) bool

	mu      sync.Mutex
	running bool
	started time.Time       // the last full check's start (zero: none yet)
	signsAt uint64          // signs when the running check started
	done    bool            // a full check has finished: the start-up log is written
	members map[uint64]bool // the members the last full check proved fixed
	errored bool            // guardOff: the error for an affected member is logged
}

// guardOn says whether a grant made now carries the revoke guard.
func (b *Backend) guardOn() bool {
	switch b.cfg.guard {
	case guardForced:
		return true
	case guardOff:
		return false
	}
	return !b.g.fixed.Load()
}

// guardDelay is the lock-delay a grant's marker records: the one asked
// for, raised under the guard to the session's grant, the most a reply
// reports (a holder's belief runs at most that long past a renewal sent
// before the revocation).
func guardDelay(asked time.Duration, s *esession, guarded bool) time.Duration {
	if guarded {
		return max(asked, s.grant)
	}
	return asked
}

// maybeCheckVersions starts a version check in the background (never
// delaying the caller) when none has run, or when the last started
// recheckEvery ago and the guard is decided by it (not forced on).
func (b *Backend) maybeCheckVersions() {
	g := &b.g
	g.mu.Lock()
	due := !g.running && (g.started.IsZero() || b.cfg.guard != guardForced && time.Since(g.started) >= recheckEvery)
	if due {
		g.running, g.started = true, time.Now()
		g.signsAt = g.signs.Load()
	}
	g.mu.Unlock()
	if !due {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		g.mu.Lock()
		g.running = false
		g.mu.Unlock()
		return
	}
	b.bg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.bg.Done()
		b.checkVersions()
	}()
}

// checkVersions asks every member's version and applies the verdict:
// under guardAuto the guard turns off only if every member is proven
// fixed and nothing said otherwise while the check ran, and turns back on
// (marking the live terms granted without it) if it was off.
func (b *Backend) checkVersions() {
	g := &b.g
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	v := b.askVersions(ctx, g.affected)
	cancel()
	g.mu.Lock()
	g.running = false
	first := !g.done
	g.done = true
	if v.fixed && g.signs.Load() != g.signsAt {
		v.fixed, v.why = false, "a Status reply during the check showed an affected or unknown member"
	}
	fixed := v.fixed
	if fixed {
		g.members = v.ids
	}
	was := false
	if b.cfg.guard == guardAuto {
		was = g.fixed.Swap(fixed)
	}
	logOff := b.cfg.guard == guardOff && !fixed && !g.errored
	if b.cfg.guard == guardOff {
		g.errored = !fixed
	}
	g.mu.Unlock()
	members := v.String()
	switch {
	case b.cfg.guard == guardForced:
		if first {
			b.cfg.logger.Info("etcdsimba: the revoke guard is on (WithRevokeGuard)", "members", members)
		}
	case logOff:
		b.cfg.logger.Error("etcdsimba: the revoke guard is off (WithoutRevokeGuard) but a member's etcd version may revoke a lease before its TTL after a leader's stall (etcd-io/etcd#15247; only 3.4.31-3.4.33 and 3.5.13-3.5.15 are fixed, later releases skip the check after a pause): two holders are possible for up to a lease; upgrade, or drop WithoutRevokeGuard",
			"members", members, "reason", v.why)
	case b.cfg.guard == guardOff:
		if first {
			b.cfg.logger.Debug("etcdsimba: the revoke guard is off (WithoutRevokeGuard); every member runs a fixed etcd version", "members", members)
		}
	case fixed && (first || !was):
		b.cfg.logger.Info("etcdsimba: the revoke guard is off: every member runs an etcd version that does not revoke leases early (etcd-io/etcd#15247)", "members", members)
	case !fixed && (first || was):
		b.cfg.logger.Warn("etcdsimba: the revoke guard is on because of the members' etcd versions: every version but 3.4.31-3.4.33 and 3.5.13-3.5.15 (later releases skip the leadership check after a pause), or one this backend could not read, may revoke a lease early after a leader's stall (etcd-io/etcd#15247); a term that ends without a release keeps its name refused one lease longer",
			"members", members, "reason", v.why)
		if was {
			b.markLiveAll()
		}
	}
}

// memberVersion is one member's version as a check found it ("" if
// unknown).
type memberVersion struct {
	id      uint64
	name    string
	version string
}

// verdict is a version check's outcome.
type verdict struct {
	members []memberVersion
	ids     map[uint64]bool // every member, when fixed
	fixed   bool
	why     string // when not fixed: the first reason
}

func (v verdict) String() string {
	var parts []string
	for _, m := range v.members {
		ver := m.version
		if ver == "" {
			ver = "unknown"
		}
		parts = append(parts, fmt.Sprintf("%s(%x)=%s", m.name, m.id, ver))
	}
	return strings.Join(parts, ", ")
}

// askVersions asks the member list and every member's Status: first
// through the client's endpoints, then, for a member none of them is,
// through the member's own client URLs (with the client's TLS and
// credentials).
func (b *Backend) askVersions(ctx context.Context, affected func(string) bool) verdict {
	var (
		mu       sync.Mutex
		versions = map[uint64]string{}
		wg       sync.WaitGroup
	)
	status := func(ep string, want uint64) bool {
		st, err := b.cli.Status(ctx, ep)
		if err != nil || st.Header == nil || want != 0 && st.Header.MemberId != want {
			b.cfg.logger.Debug("etcdsimba: version check: no status", "endpoint", ep, "err", err)
			return false
		}
		mu.Lock()
		versions[st.Header.MemberId] = st.Version
		mu.Unlock()
		return true
	}
	var ml *clientv3.MemberListResponse
	var mlErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ml, mlErr = b.cli.MemberList(ctx)
	}()
	for _, ep := range b.cli.Endpoints() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status(ep, 0)
		}()
	}
	wg.Wait()
	if mlErr != nil {
		return judge(nil, versions, affected, fmt.Sprintf("no member list: %v", mlErr))
	}
	for _, m := range ml.Members {
		mu.Lock()
		_, ok := versions[m.ID]
		mu.Unlock()
		if ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, u := range m.ClientURLs {
				if status(u, m.ID) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return judge(ml.Members, versions, affected, "")
}

// judge is the verdict on a member list and the versions found by member
// id: fixed only if there is a list and every member on it, and every
// member that answered, runs a version affected says is fixed. A member
// without a version (no answer, an unstarted member, a learner that
// cannot be reached) counts as affected: it may run one.
func judge(list []*pb.Member, versions map[uint64]string, affected func(string) bool, why string) verdict {
	v := verdict{ids: map[uint64]bool{}, fixed: why == "", why: why}
	if len(list) == 0 && v.fixed {
		// A cluster has a member: an empty list is a nonsensical reply,
		// and the members that answered a Status may not be all of them.
		v.fixed, v.why = false, "the member list is empty"
	}
	seen := map[uint64]bool{}
	for _, m := range list {
		seen[m.ID] = true
		v.members = append(v.members, memberVersion{id: m.ID, name: m.Name, version: versions[m.ID]})
	}
	for id, ver := range versions {
		if !seen[id] {
			v.members = append(v.members, memberVersion{id: id, name: "?", version: ver})
		}
	}
	slices.SortFunc(v.members, func(a, b memberVersion) int { return strings.Compare(a.name+fmt.Sprint(a.id), b.name+fmt.Sprint(b.id)) })
	for _, m := range v.members {
		v.ids[m.id] = true
		if !v.fixed {
			continue
		}
		switch {
		case m.version == "":
			v.fixed, v.why = false, fmt.Sprintf("member %s (%x) did not tell its version", m.name, m.id)
		case affected(m.version):
			v.fixed, v.why = false, fmt.Sprintf("member %s (%x) runs etcd %s", m.name, m.id, m.version)
		}
	}
	if len(v.members) == 0 && v.fixed {
		v.fixed, v.why = false, "no member found"
	}
	return v
}

// sawStatus looks at a Status reply the backend got for another reason
// (every Open, Renew and Acquire asks one member's, ADR 0209): while the
// guard is off, an affected version, or a member or leader the last check
// did not prove fixed, turns it back on at once.
func (b *Backend) sawStatus(st *pb.StatusResponse) {
	g := &b.g
	if b.cfg.guard != guardAuto || st == nil || st.Header == nil {
		return
	}
	if !g.fixed.Load() && !g.duringCheck(st) {
		return
	}
	why := ""
	if g.affected(st.Version) {
		why = "a member runs an affected etcd version"
	} else {
		g.mu.Lock()
		member, leader := g.members[st.Header.MemberId], st.Leader == 0 || g.members[st.Leader]
		g.mu.Unlock()
		switch {
		case !member:
			why = "a member the last version check did not see answered"
		case !leader:
			why = "a member the last version check did not see leads"
		}
	}
	if why == "" {
		return
	}
	g.signs.Add(1)
	if g.fixed.CompareAndSwap(true, false) {
		b.cfg.logger.Warn("etcdsimba: the revoke guard is back on: "+why+" (etcd-io/etcd#15247); the live terms granted without it get its marker",
			"member", fmt.Sprintf("%x", st.Header.MemberId), "version", st.Version, "leader", fmt.Sprintf("%x", st.Leader))
		b.markLiveAll()
	}
}

// duringCheck records, while the guard is on, a Status reply that shows
// an affected version while a check runs: the check may have read that
// member before it was downgraded, and must not turn the guard off. (A
// member or leader its member list lacks turns the guard back on at its
// next reply after the check, judged against that list.) It reports
// whether the guard is off after all (a check ended meanwhile): the reply
// is then judged as one that came after it.
func (g *revokeGuard) duringCheck(st *pb.StatusResponse) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fixed.Load() {
		return true
	}
	if bad := g.running && g.affected(st.Version); bad {
		g.signs.Add(1)
	}
	return false
}

// unguarded are the session's names whose terms carry no marker of the
// guard's length.
func (s *esession) unguarded() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]uint64{}
	for n, t := range s.owned {
		if d, ok := s.marked[n]; !ok || d < s.grant {
			out[n] = t
		}
	}
	return out
}

// markLiveAll gives the guard's marker, in the background, to every live
// term of the backend's sessions that lacks it: the guard turned on while
// they ran (ADR 0305). A term it cannot mark (the server unreachable, the
// request lost) leaves its session flagged, and the session's next
// renewals try again while the guard is on (remark).
func (b *Backend) markLiveAll() {
	b.mu.Lock()
	all := make([]*esession, 0, len(b.sessions))
	for _, s := range b.sessions {
		all = append(all, s)
	}
	b.mu.Unlock()
	b.markSessions(all)
}

// remark starts another marking pass over s's terms when an earlier one
// could not mark all of them and the guard is on: the renewal that calls
// it got through, so the marks likely will too.
func (b *Backend) remark(s *esession) {
	if s.unmarked.Load() && b.guardOn() && s.unmarked.CompareAndSwap(true, false) {
		b.markSessions([]*esession{s})
	}
}

// markSessions marks, in the background, the live terms of the sessions
// in all that lack the guard's marker.
func (b *Backend) markSessions(all []*esession) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.bg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxInFlight)
		for _, s := range all {
			for name, tok := range s.unguarded() {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					if err := b.markLive(ctx, s, name, tok); err != nil {
						s.unmarked.Store(true)
						b.cfg.logger.Warn("etcdsimba: a live term could not get the revoke guard's marker; its session's renewals try again", "session", s.id, "name", name, "err", err)
					}
				}()
			}
		}
		wg.Wait()
	}()
}

// markLive puts the guard's marker (the session's grant) on a live term
// of s, in one transaction conditioned on the term's key being there,
// ours under tok: a term already ended gets nothing, and a candidate that
// finds the key gone afterwards finds the marker. While the key stands
// only its holder touches the marker, so the put replaces at most a
// shorter lock-delay of its own.
func (b *Backend) markLive(ctx context.Context, s *esession, name string, tok uint64) error {
	rev, ok := s.ep.createRev(tok)
	if !ok {
		return nil
	}
	key := b.k.lease + name
	s.mu.Lock()
	d := max(s.marked[name], s.grant)
	s.mu.Unlock()
	floor := b.floor()
	resp, err := hedged(ctx, b.attempts(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)).
			Then(clientv3.OpPut(b.k.delay+name, markerValue(d, s.id))).Commit()
	})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		b.observe(floor, resp.Header.Revision)
		return nil
	}
	b.observeWrite(floor, resp.Header.Revision)
	s.mu.Lock()
	if t, ok := s.owned[name]; ok && t == tok {
		s.marked[name] = d
	}
	s.mu.Unlock()
	return nil
}
