package etcdsimba

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxInFlight bounds the transactions one Acquire or Release has in flight
// at once.
const maxInFlight = 64

// Backend is the etcd implementation of [driver.Backend],
// [driver.Broadcaster] and [driver.Inspector].
//
// A Simba session is an etcd lease granted by [Backend.Open]; its ID is the
// lease id in hex. A Simba lease is the key <ns>/@simba/l/<name>, put on
// the session's etcd lease in a transaction only if absent; its token comes
// from the key's create revision (ADR 0208). One Backend value serves any
// number of sessions over the user's *clientv3.Client, which it never
// closes.
type Backend struct {
	cli   *clientv3.Client
	maint pb.MaintenanceClient // Status over cli's own connection
	ns    string
	k     keys
	cfg   config

	mu       sync.Mutex
	sessions map[driver.ID]*esession
	byLease  map[clientv3.LeaseID]*esession
	closed   bool
	ep       *epoch    // the namespace's epoch as last read or written
	qEnd     time.Time // the end of ep's quarantine on the local monotonic clock; zero: none
	lost     string    // the raw epoch in which this process saw the revision go back

	// maxTok is the highest token this Backend value has reported: a
	// second guard, within one process, behind the epochs that keep tokens
	// rising in every process. A grant whose request was sent after the
	// reply of a grant of token t (of any name, any epoch) must have a
	// token above t (ADR 0255); one constant-size word instead of a map of
	// every name ever granted.
	maxTok atomic.Uint64

	// maxRev is the highest header revision a linearizable reply showed
	// (ADR 0209): a later request's reply below it means the store went
	// back.
	maxRev atomic.Int64

	w  watcher
	bg sync.WaitGroup // revocations in the background
	g  revokeGuard    // the members' versions against etcd-io/etcd#15247 (ADR 0305)
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Broadcaster = (*Backend)(nil)
	_ driver.Inspector   = (*Backend)(nil)
)

// esession is one Simba session: one etcd lease.
type esession struct {
	id    driver.ID
	lease clientv3.LeaseID
	ep    *epoch
	grant time.Duration // the most a reply reports: min(lease asked, MaxLease)

	expired atomic.Bool
	// unmarked: a marking pass of the revoke guard could not mark one of
	// the session's live terms; its renewals start another (ADR 0305).
	unmarked atomic.Bool

	mu      sync.Mutex
	owned   map[string]uint64
	marked  map[string]time.Duration // owned names whose term has a lock-delay marker, and its delay
	version uint64
	pending map[string]int // names with an acquisition in flight
}

// New returns a Backend over cli (the user's client, with its endpoints,
// TLS and credentials) that keeps its keys under namespace, checked by
// [ValidateNamespace] (for example "/simba/myapp"). It sends nothing until
// [Backend.Open], [Backend.Init] or [Backend.Inspect].
func New(cli *clientv3.Client, namespace string, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil *clientv3.Client", ErrInvalidOption)
	}
	if len(cli.Endpoints()) == 0 {
		return nil, fmt.Errorf("%w: the client has no endpoints", ErrInvalidOption)
	}
	for _, ep := range cli.Endpoints() {
		if err := checkEndpoint(ep); err != nil {
			return nil, err
		}
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cli: cli, maint: pb.NewMaintenanceClient(cli.ActiveConnection()), ns: namespace, k: newKeys(namespace), cfg: cfg,
		sessions: make(map[driver.ID]*esession),
		byLease:  make(map[clientv3.LeaseID]*esession),
	}
	b.g.affected = revokesEarly
	b.w.init(b)
	return b, nil
}

// checkEndpoint refuses an endpoint the client could never dial, so that
// the mistake is reported by New rather than by a renewal's timeout.
func checkEndpoint(ep string) error {
	host := ep
	if i := strings.Index(ep, "://"); i >= 0 {
		switch scheme := ep[:i]; scheme {
		case "http", "https", "unix", "unixs":
		default:
			return fmt.Errorf("%w: endpoint %q: scheme %q (want http, https, unix or unixs)", ErrInvalidOption, ep, scheme)
		}
		host = ep[i+3:]
		if strings.HasPrefix(ep, "unix") {
			if host == "" {
				return fmt.Errorf("%w: endpoint %q: no socket path", ErrInvalidOption, ep)
			}
			return nil
		}
	}
	host = strings.TrimSuffix(host, "/")
	i := strings.LastIndexByte(host, ':')
	if host == "" || i <= 0 || i == len(host)-1 {
		return fmt.Errorf("%w: endpoint %q: want host:port", ErrInvalidOption, ep)
	}
	if p, err := strconv.Atoi(host[i+1:]); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("%w: endpoint %q: port %q is not a number in 1-65535", ErrInvalidOption, ep, host[i+1:])
	}
	return nil
}

// Namespace is the key prefix the backend's keys live under (below
// <namespace>/@simba/).
func (b *Backend) Namespace() string { return b.ns }

func formatID(l clientv3.LeaseID) driver.ID { return driver.ID(fmt.Sprintf("%016x", uint64(l))) }

func parseID(id driver.ID) (clientv3.LeaseID, bool) {
	if len(id) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(id), 16, 64)
	if err != nil || v == 0 || v >= 1<<63 {
		return 0, false
	}
	return clientv3.LeaseID(v), true
}

// floor is the revision every linearizable reply to a request sent now
// must reach: the highest one a reply received before showed.
func (b *Backend) floor() int64 { return b.maxRev.Load() }

// observe records a linearizable reply's header revision, and treats one
// below floor as the store going back (ADR 0209): a restore from a
// snapshot or a lost write. Every session of the epoch ends, and the next
// Open starts a new epoch in quarantine.
func (b *Backend) observe(floor, rev int64) { b.observeRev(floor, rev, false) }

// observeWrite is observe for the reply to a request that wrote: its
// revision is a new one, above every revision seen before it was sent.
func (b *Backend) observeWrite(floor, rev int64) { b.observeRev(floor, rev, true) }

func (b *Backend) observeRev(floor, rev int64, wrote bool) {
	for {
		cur := b.maxRev.Load()
		if rev <= cur || b.maxRev.CompareAndSwap(cur, rev) {
			break
		}
	}
	if rev > floor || rev == floor && !wrote {
		return
	}
	b.mu.Lock()
	if b.ep != nil && b.lost != b.ep.raw {
		b.lost = b.ep.raw
		b.cfg.logger.Error("etcdsimba: the store's revision went back: treating it as a loss of the namespace's records",
			"namespace", b.ns, "revision", rev, "seen", floor)
	}
	for _, s := range b.sessions {
		s.expired.Store(true)
	}
	b.mu.Unlock()
	// The maximum goes down with the store: otherwise every later reply
	// would count as another regression.
	b.maxRev.Store(rev)
	b.w.restart()
}

func (b *Backend) lostEpoch() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost
}

// wrapCtx makes an error that ended with ctx wrap ctx's error too.
func (b *Backend) wrapCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return err
}

// leaseGone reports whether err says the etcd lease does not exist.
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

// Open grants an etcd lease of req.LeaseDuration (rounded up to whole
// seconds, capped by WithMaxLease) and puts the session's key with its
// owner on it, after checking the namespace's epoch against the store's
// history.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if req.LeaseDuration < time.Millisecond || req.LeaseDuration > 24*time.Hour {
		return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: lease duration %v out of range [1ms, 24h]", req.LeaseDuration)
	}
	if err := req.Owner.Check(); err != nil {
		return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", context.Cause(ctx))
	}
	if b.isClosed() {
		return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", driver.ErrClosed)
	}
	owner, err := json.Marshal(req.Owner)
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", err)
	}
	b.w.ensure()
	b.maybeCheckVersions()
	lease := min(req.LeaseDuration, b.cfg.maxLease)
	for attempt := 0; ; attempt++ {
		ep, err := b.loadEpoch(ctx, openMode)
		if err != nil {
			return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", b.wrapCtx(ctx, err))
		}
		gr, err := b.cli.Grant(ctx, ceilSeconds(lease))
		if err != nil {
			return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: grant a lease: %w", b.wrapCtx(ctx, err))
		}
		id := formatID(gr.ID)
		floor := b.floor()
		resp, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(b.k.epoch), "=", ep.raw)).
			Then(clientv3.OpPut(b.k.session+string(id), string(owner), clientv3.WithLease(gr.ID))).
			Commit()
		if err != nil {
			b.revokeAsync(gr.ID)
			return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", b.wrapCtx(ctx, err))
		}
		if resp.Succeeded {
			b.observeWrite(floor, resp.Header.Revision)
		} else {
			b.observe(floor, resp.Header.Revision)
		}
		if !resp.Succeeded {
			b.revokeAsync(gr.ID)
			if attempt < 3 {
				continue // the epoch changed between the read and the put
			}
			return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: the namespace's epoch changed at every attempt")
		}
		s := &esession{id: id, lease: gr.ID, ep: ep, grant: lease, owned: make(map[string]uint64), marked: make(map[string]time.Duration), pending: make(map[string]int), version: 1}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			b.revokeAsync(gr.ID)
			return driver.OpenReply{}, fmt.Errorf("etcdsimba: open: %w", driver.ErrClosed)
		}
		b.sessions[id], b.byLease[gr.ID] = s, s
		b.mu.Unlock()
		// Markers are left by terms with a lock-delay or the revoke guard,
		// of this process or another.
		if b.cfg.maxLockDelay > 0 || b.cfg.guard != guardOff {
			b.sweepMarkers(s)
		}
		b.cfg.logger.Debug("etcdsimba: session opened", "session", id, "requested", req.LeaseDuration, "ttl", gr.TTL)
		return driver.OpenReply{ID: id, Remaining: s.remaining(gr.TTL)}, nil
	}
}

// restoredReply is the outcome of a restore check.
type restoredReply struct {
	yes bool
	why string
	err error
}

// restoredAsync checks in the background whether the store was restored
// from a snapshot since ep was written (ADR 0209): its revision runs ahead
// of its raft applied index by more than the gap the epoch recorded. A
// restore found here is also recorded as a loss of ep, so the next Open
// starts a new epoch in quarantine.
func (b *Backend) restoredAsync(ctx context.Context, ep *epoch) <-chan restoredReply {
	ch := make(chan restoredReply, 1)
	go func() {
		g, err := b.gap(ctx)
		switch {
		case err != nil:
			ch <- restoredReply{err: err}
		case g.restoredSince(ep):
			b.mu.Lock()
			if b.lost != ep.raw {
				b.lost = ep.raw
				b.cfg.logger.Error("etcdsimba: the store was restored from a snapshot: treating it as a loss of the namespace's records",
					"namespace", b.ns, "gap", g.rev-g.committed, "recorded", ep.rec.Gap)
			}
			b.mu.Unlock()
			b.w.restart()
			ch <- restoredReply{yes: true, why: fmt.Sprintf("the store was restored from a snapshot (revision %d ahead of the raft index, %d when the epoch was written)", g.rev-g.committed, ep.rec.Gap)}
		default:
			ch <- restoredReply{}
		}
	}()
	return ch
}

// remaining is what a grant of ttl seconds (the server's figure, measured
// from when it handled the request) leaves the session, capped by the
// lease asked for and MaxLease.
func (s *esession) remaining(ttl int64) time.Duration {
	return min(time.Duration(ttl)*time.Second, s.grant)
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// lookup finds an open session; an unknown or expired one answers
// ErrExpired: a session never comes back.
func (b *Backend) lookup(id driver.ID) (*esession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, driver.ErrClosed
	}
	s, ok := b.sessions[id]
	if !ok || s.expired.Load() {
		return nil, fmt.Errorf("session %s: %w", id, driver.ErrExpired)
	}
	return s, nil
}

// expire ends a session for good and forgets it; its etcd lease is revoked
// in the background, so its keys go at once rather than at its TTL.
func (b *Backend) expire(s *esession, why string) error {
	if !s.expired.Swap(true) {
		b.cfg.logger.Warn("etcdsimba: session expired", "session", s.id, "reason", why)
	}
	b.mu.Lock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
		delete(b.byLease, s.lease)
	}
	b.mu.Unlock()
	b.revokeAsync(s.lease)
	return fmt.Errorf("session %s: %w (%s)", s.id, driver.ErrExpired, why)
}

// revokeAsync revokes an etcd lease without waiting: a failure only leaves
// the lease to its TTL.
func (b *Backend) revokeAsync(l clientv3.LeaseID) {
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.cli.Revoke(ctx, l)
	}()
}

// Renew proves the session alive with one KeepAliveOnce, whatever the
// number of leases, and, in parallel, one transaction comparing the
// namespace's epoch (ADR 0207). The remaining time is the TTL the server
// restarted, measured from when it handled the keepalive. The owned set is
// kept from the backend's own acquisitions and releases and from the
// namespace watch.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if err := ctx.Err(); err != nil {
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", context.Cause(ctx))
	}
	s, err := b.lookup(req.ID)
	if err != nil {
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", err)
	}
	b.maybeCheckVersions()
	type checked struct {
		ok  bool
		err error
	}
	ch := make(chan checked, 1)
	floor := b.floor()
	go func() {
		resp, err := hedged(ctx, b.attempts(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
			// The read makes the transaction linearizable: etcd serves a
			// transaction without a non-serializable read from the member's
			// own state, without a quorum (ADR 0207), and this one is what
			// proves that the leader that renewed the lease leads a quorum.
			return b.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(b.k.epoch), "=", s.ep.raw)).
				Then(clientv3.OpGet(b.k.epoch, clientv3.WithCountOnly())).Commit()
		})
		if err != nil {
			ch <- checked{err: err}
			return
		}
		b.observe(floor, resp.Header.Revision)
		ch <- checked{ok: resp.Succeeded}
	}()
	gch := b.restoredAsync(ctx, s.ep)
	ka, kerr := hedged(ctx, b.attempts(), func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return b.cli.KeepAliveOnce(ctx, s.lease)
	})
	c := <-ch
	restored := <-gch
	switch {
	case kerr != nil && leaseGone(kerr):
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", b.expire(s, "the server no longer knows its etcd lease"))
	case kerr != nil:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew %s: %w", s.id, b.wrapCtx(ctx, kerr))
	case ka.TTL <= 0:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", b.expire(s, "its etcd lease expired"))
	case c.err != nil:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew %s: %w", s.id, b.wrapCtx(ctx, c.err))
	case !c.ok:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", b.expire(s, "the namespace's epoch is gone: its records were lost"))
	case restored.err != nil:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew %s: %w", s.id, b.wrapCtx(ctx, restored.err))
	case restored.yes:
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", b.expire(s, restored.why))
	case s.expired.Load():
		return driver.RenewReply{}, fmt.Errorf("etcdsimba: renew: %w", b.expire(s, "the store's revision went back"))
	}
	// A live term the guard's last pass could not mark: again, now that a
	// renewal got through.
	b.remark(s)
	reply := driver.RenewReply{Remaining: s.remaining(ka.TTL)}
	s.mu.Lock()
	reply.Version = s.version
	s.mu.Unlock()
	if req.KnownVersion != reply.Version {
		// The list only when the engine's copy is out of date: building
		// and sorting 10,000 leases at every renewal cost more than the
		// renewal's requests (BenchmarkRenew).
		reply.Version, reply.Leases = s.ownedSet()
		reply.Full = true
	}
	return reply, nil
}

// ownedSet is the session's owned set and its version, in no order: the
// SPI asks for a set, and the engine makes a map of it. Sorting 10,000
// names took 85 % of a full renewal's CPU (BenchmarkRenewFullList), with
// s.mu held, which the watch needs for every event of the session's keys.
func (s *esession) ownedSet() (uint64, []driver.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	leases := make([]driver.Lease, 0, len(s.owned))
	for n, t := range s.owned {
		leases = append(leases, driver.Lease{Name: n, Token: t})
	}
	return s.version, leases
}

// quarantineLeft is what is left of the epoch's quarantine, or 0. While the
// local end has not passed it asks the server whether the quarantine key is
// still there: gone means the server's lease for it, as long as the
// quarantine and granted after the loss was found, has expired.
func (b *Backend) quarantineLeft(ctx context.Context, ep *epoch) (time.Duration, error) {
	b.mu.Lock()
	end := b.qEnd
	same := b.ep == ep
	b.mu.Unlock()
	if !same || end.IsZero() {
		return 0, nil
	}
	left := time.Until(end)
	if left <= 0 {
		return 0, nil
	}
	floor := b.floor()
	resp, err := b.cli.Get(ctx, b.k.quarantine)
	if err != nil {
		return 0, err
	}
	b.observe(floor, resp.Header.Revision)
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != ep.rec.Epoch {
		b.mu.Lock()
		if b.ep == ep {
			b.qEnd = time.Time{}
		}
		b.mu.Unlock()
		return 0, nil
	}
	return left, nil
}

// acquired is one name's outcome.
type acquired struct {
	tok     uint64
	err     error // the result's error
	gone    bool  // the epoch is gone
	expired bool  // the session's lease is gone
	// fresh: tok comes from a write this call sent (not from a key found
	// the session's, which an earlier call may have written before
	// replies this call's floor includes).
	fresh bool
}

// Acquire tries each name with one transaction: if the epoch is the
// session's and the key is absent, put it on the session's etcd lease.
// Inside a quarantine nothing is granted and the reply says how long it
// lasts; a session whose epoch is gone answers [driver.ErrExpired].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if err := ctx.Err(); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", context.Cause(ctx))
	}
	if err := b.checkLockDelay(req.LockDelay); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", err)
	}
	s, err := b.lookup(req.ID)
	if err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", err)
	}
	results := make([]driver.AcquireResult, len(req.Names))
	for i, n := range req.Names {
		results[i].Name = n
		if err := deadline.ValidateName(n); err != nil {
			results[i].Err = err
		}
	}
	q, err := b.quarantineLeft(ctx, s.ep)
	if err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire %s: %w", s.id, b.wrapCtx(ctx, err))
	}
	if q > 0 {
		return driver.AcquireReply{Results: results, Quarantine: q}, nil
	}
	// The restore check runs beside the grants: a grant in a restored
	// store is never reported (the session ends, its keys with it).
	gch := b.restoredAsync(ctx, s.ep)
	tokFloor := b.maxTok.Load()
	outs := make([]acquired, len(req.Names))
	errs := make([]error, len(req.Names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	for i, name := range req.Names {
		if results[i].Err != nil {
			continue
		}
		if len(req.Names) == 1 {
			outs[i], errs[i] = b.acquire(ctx, s, name, req.LockDelay)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			outs[i], errs[i] = b.acquire(ctx, s, name, req.LockDelay)
		}()
	}
	wg.Wait()
	if r := <-gch; r.err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire %s: %w", s.id, b.wrapCtx(ctx, r.err))
	} else if r.yes {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", b.expire(s, r.why))
	}
	for _, o := range outs {
		switch {
		case o.gone:
			return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", b.expire(s, "the namespace's epoch is gone: its records were lost"))
		case o.expired:
			return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", b.expire(s, "the server no longer knows its etcd lease"))
		}
	}
	if s.expired.Load() {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire: %w", b.expire(s, "the store's revision went back"))
	}
	if err := errors.Join(errs...); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire %s: %w", s.id, b.wrapCtx(ctx, err))
	}
	var back []driver.Lease
	top := uint64(0)
	for i, o := range outs {
		r := &results[i]
		if r.Err != nil {
			continue
		}
		r.Token, r.Err = o.tok, o.err
		if r.Token == 0 {
			continue
		}
		if o.fresh && r.Token <= tokFloor {
			r.Err = fmt.Errorf("%w: %q got token %d after this process reported %d", ErrTokenRegressed, r.Name, r.Token, tokFloor)
			back = append(back, driver.Lease{Name: r.Name, Token: r.Token})
			r.Token = 0
			continue
		}
		top = max(top, r.Token)
	}
	for cur := b.maxTok.Load(); top > cur && !b.maxTok.CompareAndSwap(cur, top); cur = b.maxTok.Load() {
	}
	if len(back) > 0 {
		if err := b.Release(ctx, driver.ReleaseRequest{ID: req.ID, Leases: back}); err != nil {
			return driver.AcquireReply{}, fmt.Errorf("etcdsimba: acquire %s: %w", s.id, err)
		}
	}
	return driver.AcquireReply{Results: results}, nil
}

// acquire tries one name; see Backend.Acquire. A grant with delay > 0
// puts the name's lock-delay marker in the same transaction; every grant
// requires the marker absent (a name in its delay is held by its lease key).
func (b *Backend) acquire(ctx context.Context, s *esession, name string, delay time.Duration) (acquired, error) {
	s.mu.Lock()
	tok, own := s.owned[name]
	s.mu.Unlock()
	if own {
		return acquired{tok: tok}, nil
	}
	key, mkey := b.k.lease+name, b.k.delay+name
	// Under the revoke guard every term has a marker of at least its
	// session's grant (ADR 0290, 0305).
	delay = guardDelay(delay, s, b.guardOn())
	epochIs := clientv3.Compare(clientv3.Value(b.k.epoch), "=", s.ep.raw)
	then := []clientv3.Op{clientv3.OpPut(key, string(s.id), clientv3.WithLease(s.lease))}
	if delay > 0 {
		then = append(then, clientv3.OpPut(mkey, markerValue(delay, s.id)))
	}
	s.mu.Lock()
	s.pending[name]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.pending[name]--; s.pending[name] == 0 {
			delete(s.pending, name)
		}
		s.mu.Unlock()
	}()
	for attempt := 0; attempt < 3; attempt++ {
		floor := b.floor()
		// Hedged: a second application finds the key ours (below).
		resp, err := hedged(ctx, b.attempts(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return b.cli.Txn(ctx).
				If(epochIs, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(mkey), "=", 0)).
				Then(then...).
				Else(clientv3.OpGet(b.k.epoch), clientv3.OpGet(key), clientv3.OpGet(mkey)).
				Commit()
		})
		if err != nil {
			if leaseGone(err) {
				return acquired{expired: true}, nil
			}
			return acquired{}, err
		}
		if resp.Succeeded {
			b.observeWrite(floor, resp.Header.Revision)
			a, err := b.made(ctx, s, name, resp.Header.Revision, delay)
			a.fresh = true
			return a, err
		}
		b.observe(floor, resp.Header.Revision)
		if ekv := firstKV(resp, 0); ekv == nil || string(ekv.Value) != s.ep.raw {
			return acquired{gone: true}, nil
		}
		kv, mkv := firstKV(resp, 1), firstKV(resp, 2)
		switch {
		case kv == nil && mkv != nil && mkv.CreateRevision <= s.ep.rev:
			// A marker from before the epoch: the quarantine covered its
			// delay (MaxLease + MaxLockDelay). Delete it and try again.
			if _, err := b.cli.Txn(ctx).
				If(epochIs, clientv3.Compare(clientv3.ModRevision(mkey), "=", mkv.ModRevision)).
				Then(clientv3.OpDelete(mkey)).Commit(); err != nil {
				return acquired{}, err
			}
			continue
		case kv == nil && mkv != nil:
			// The term ended without a release: its delay starts now.
			if err := b.startDelay(ctx, s, name, mkv); err != nil {
				return acquired{}, err
			}
			return acquired{}, nil
		case kv == nil:
			continue // deleted in between: try again
		case clientv3.LeaseID(kv.Lease) == s.lease:
			// Ours, from an acquisition whose reply was lost.
			var md time.Duration
			if mkv != nil {
				md = b.markerDelay(mkv)
			}
			return b.made(ctx, s, name, kv.CreateRevision, md)
		case kv.CreateRevision <= s.ep.rev:
			// A key from before the epoch: its holder's session ended with
			// the lost records, and the quarantine (or the operator's
			// Init) has covered its belief. Delete it and try again.
			if _, err := b.cli.Txn(ctx).
				If(epochIs, clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision)).
				Then(clientv3.OpDelete(key)).Commit(); err != nil {
				return acquired{}, err
			}
			continue
		default:
			return acquired{}, nil // held: the namespace watch tells of its delete
		}
	}
	return acquired{}, nil
}

// made makes the session's new key (created at revision rev) a term, or
// deletes it (with its marker) if its token fails the checks. marked: the
// delay of the term's lock-delay marker (0: none).
func (b *Backend) made(ctx context.Context, s *esession, name string, rev int64, marked time.Duration) (acquired, error) {
	tok, err := s.ep.token(rev, time.Now().Unix())
	if err != nil {
		key := b.k.lease + name
		if _, derr := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(b.k.delay+name)).Commit(); derr != nil {
			return acquired{}, derr
		}
		return acquired{err: err}, nil
	}
	s.mu.Lock()
	s.owned[name] = tok
	if marked > 0 {
		s.marked[name] = marked
	}
	s.version++
	s.mu.Unlock()
	// The guard turned on while the grant was in flight: a pass over the
	// live terms (markLiveAll) may have read the owned set before it had
	// this one (ADR 0305).
	if marked < s.grant && b.guardOn() {
		if err := b.markLive(ctx, s, name, tok); err != nil {
			b.cfg.logger.Warn("etcdsimba: a new term could not get the revoke guard's marker; trying again in the background", "session", s.id, "name", name, "err", err)
			s.unmarked.Store(true)
			b.remark(s)
		}
	}
	return acquired{tok: tok}, nil
}

func firstKV(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(resp.Responses) {
		return nil
	}
	r := resp.Responses[i].GetResponseRange()
	if r == nil || len(r.Kvs) == 0 {
		return nil
	}
	return r.Kvs[0]
}

// Release deletes the keys the session owns under the given tokens, each
// with a transaction comparing the key's create revision (from the token)
// and lease: a lease not owned under that token is left alone. The watch
// of every subscribed client sees the delete.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdsimba: release: %w", context.Cause(ctx))
	}
	for _, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return fmt.Errorf("etcdsimba: release: %w", err)
		}
	}
	s, err := b.lookup(req.ID)
	if err != nil {
		if errors.Is(err, driver.ErrExpired) {
			return nil // its keys went with its etcd lease (or will, at its TTL)
		}
		return fmt.Errorf("etcdsimba: release: %w", err)
	}
	errs := make([]error, len(req.Leases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	for i, l := range req.Leases {
		if len(req.Leases) == 1 {
			errs[i] = b.release(ctx, s, l)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = b.release(ctx, s, l)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("etcdsimba: release %s: %w", s.id, b.wrapCtx(ctx, err))
	}
	return nil
}

func (b *Backend) release(ctx context.Context, s *esession, l driver.Lease) error {
	rev, ok := s.ep.createRev(l.Token)
	if !ok {
		return nil // a token of another epoch: nothing of this session's
	}
	key := b.k.lease + l.Name
	// The marker goes with the key: while the session's key stands, a
	// marker of the name is its term's (a grant requires none, and only a
	// candidate that finds the key gone touches one), and a release skips
	// the delay.
	if _, err := hedged(ctx, b.attempts(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(b.k.delay+l.Name)).Commit()
	}); err != nil {
		return err
	}
	s.mu.Lock()
	if t, ok := s.owned[l.Name]; ok && t == l.Token {
		delete(s.owned, l.Name)
		delete(s.marked, l.Name)
		s.version++
	}
	s.mu.Unlock()
	return nil
}

// releaseMarked releases the session's names whose terms have a
// lock-delay marker, before its etcd lease is revoked: Close says the
// holder stopped, so it skips the delay like a release. Best effort: a
// marker left (the server unreachable) only delays the name.
func (b *Backend) releaseMarked(ctx context.Context, s *esession) {
	s.mu.Lock()
	leases := make([]driver.Lease, 0, len(s.marked))
	for n := range s.marked {
		leases = append(leases, driver.Lease{Name: n, Token: s.owned[n]})
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	for _, l := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := b.release(ctx, s, l); err != nil {
				b.cfg.logger.Warn("etcdsimba: close: the lock-delay marker stays (the name waits out its delay)", "session", s.id, "name", l.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Close revokes the session's etcd lease, which deletes its keys in one
// revision: every watcher sees the deletes at once. Closing an unknown or
// expired session is not an error.
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdsimba: close: %w", context.Cause(ctx))
	}
	lease, ok := parseID(id)
	if !ok {
		return nil
	}
	b.mu.Lock()
	s, ok := b.sessions[id]
	if ok {
		s.expired.Store(true)
		delete(b.sessions, id)
		delete(b.byLease, s.lease)
	}
	b.mu.Unlock()
	if ok {
		b.releaseMarked(ctx, s)
	}
	if _, err := b.cli.Revoke(ctx, lease); err != nil && !leaseGone(err) {
		return fmt.Errorf("etcdsimba: close %s: %w", id, b.wrapCtx(ctx, err))
	}
	return nil
}

// Shutdown closes every session the backend has open and stops its watch.
// The backend answers [driver.ErrClosed] afterwards. The client stays open:
// it is the caller's.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	all := make([]*esession, 0, len(b.sessions))
	for _, s := range b.sessions {
		all = append(all, s)
	}
	clear(b.sessions)
	clear(b.byLease)
	b.mu.Unlock()
	var errs []error
	for _, s := range all {
		s.expired.Store(true)
		b.releaseMarked(ctx, s)
		if _, err := b.cli.Revoke(ctx, s.lease); err != nil && !leaseGone(err) {
			errs = append(errs, fmt.Errorf("etcdsimba: shutdown: revoke %s: %w", s.id, err))
		}
	}
	if err := b.w.shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	done := make(chan struct{})
	go func() { b.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("etcdsimba: shutdown: %w", context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// put is the watch's report that a lease key was put. A key on one of
// this backend's sessions that the session neither owns under that token
// nor is acquiring is an acquisition whose reply was lost (a timeout, or a
// request a stalled member applied late): nobody was told of it, so it is
// deleted, by its create revision and lease, with the name's marker: while
// the key stands a marker is its term's (written by the same grant, or by
// the guard's mark), as for a release.
func (b *Backend) put(name string, kv *mvccpb.KeyValue) {
	b.mu.Lock()
	s := b.byLease[clientv3.LeaseID(kv.Lease)]
	b.mu.Unlock()
	if s == nil {
		return
	}
	tok, err := s.ep.token(kv.CreateRevision, 1<<32)
	s.mu.Lock()
	unknown := s.pending[name] == 0 && (err != nil || s.owned[name] != tok)
	s.mu.Unlock()
	if !unknown {
		return
	}
	key := b.k.lease + name
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision), clientv3.Compare(clientv3.LeaseValue(key), "=", kv.Lease)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(b.k.delay+name)).Commit()
	}()
}

// deleted is the watch's report that the lease key of name was deleted at
// revision rev: every session of this backend that owns the name under a
// key created before rev drops it. The watch carries no previous values
// (ADR 0326): one key of a name exists at a time, so a key created before
// the delete is either the one deleted or one deleted earlier.
func (b *Backend) deleted(name string, rev int64) {
	b.mu.Lock()
	all := make([]*esession, 0, len(b.sessions))
	for _, s := range b.sessions {
		all = append(all, s)
	}
	b.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		if t, ok := s.owned[name]; ok {
			if c, ok := s.ep.createRev(t); ok && c < rev {
				delete(s.owned, name)
				delete(s.marked, name)
				s.version++
			}
		}
		s.mu.Unlock()
	}
}
