package zksimba

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// GrantNumerator and GrantDenominator give the share of the negotiated
// session timeout that one successful renewal grants: 5/12. See
// docs/adr/0040-zk-renewal.md for why.
const (
	GrantNumerator   = 5
	GrantDenominator = 12
)

// maxInFlight bounds the requests one Acquire or Release batch has in
// flight at once: enough to pipeline a round trip's worth on one
// connection, without a goroutine per name for batches of thousands.
const maxInFlight = 128

// Grant is the remaining time one successful renewal proves for a session
// whose negotiated timeout is timeout: 5/12 of it.
func Grant(timeout time.Duration) time.Duration {
	return timeout * GrantNumerator / GrantDenominator
}

// Backend is the ZooKeeper implementation of [driver.Backend] and
// [driver.Broadcaster].
//
// Every [Backend.Open] dials a new *zk.Conn, and that connection's one
// ZooKeeper session is the Simba session: its id is the session's ID, and
// the session ends when ZooKeeper expires it or [Backend.Close] closes the
// connection. One Backend value serves any number of sessions at once (one
// connection each); a process normally has one. When ZooKeeper expires a
// session, the backend closes its connection instead of letting
// go-zookeeper open a fresh session on it, and answers
// [driver.ErrExpired] for it from then on: the engine must Open again,
// and gets a new session id.
//
// Leases are ephemeral nodes <root>/<name>. A lease's token is its node's
// creation zxid (czxid) counted from the namespace epoch, above the
// epoch's start time in seconds: start<<32 + (czxid − epoch czxid), so
// tokens rise across a lost namespace in every process (ADR 0138).
type Backend struct {
	servers []string
	root    string
	cfg     config

	mu       sync.Mutex
	sessions map[driver.ID]*zsession
	closed   bool
	quit     chan struct{} // closed by the first Shutdown

	notices notifier // delivers notices off go-zookeeper's receive loop

	wg sync.WaitGroup // goroutines the backend started

	// maxTok is the highest token this Backend value has reported: a
	// second guard, within one process, behind the epoch that keeps tokens
	// rising in every process (ADR 0138). A grant whose create was sent
	// after the reply of a grant of token t (of any name, any epoch) must
	// have a token above t (ADR 0255): one word instead of a map of every
	// name ever granted.
	maxTok atomic.Uint64

	// delayEnds estimates, on the local clock, when the lock-delay of a
	// name found ended ends by the server's clock (at most
	// maxDelayEstimates names; each removed when it passes or the name is
	// granted). Only to spare probes: the server's times decide. Guarded
	// by mu.
	delayEnds map[string]time.Time
	// orphans are names whose lock-delay markers this Backend's expired
	// sessions left, for the next session to sweep (at most maxOrphans).
	// Guarded by mu.
	orphans map[string]struct{}

	// rconn is the connection Inspect reads over (never a session's),
	// dialled on first use by whoever holds rdial; seen is what Inspect
	// read over it and has not seen change since (ADR 0159).
	rconn atomic.Pointer[zk.Conn]
	rdial chan struct{}
	rgen  atomic.Uint64 // moves on at every state change of rconn
	seen  inspectCache
}

// ErrTokenRegressed is the error of an acquisition whose token is lower
// than one this Backend value already handed out for the name, or whose
// node is older than the namespace's epoch. The epoch keeps tokens rising
// across a loss in every process (docs/adr/0138-zk-epoch-tokens.md), so
// this needs a server clock that went back across the loss by more than
// the quarantine. The lease is not made a term: its node is deleted.
var ErrTokenRegressed = errors.New("zksimba: fencing token went backwards (the ensemble lost its data)")

// ErrNotALease is the error of an acquisition whose name is taken by a
// node that is not a lease (a persistent node: another namespace's root
// or one of its parents, or an application's node under the namespace
// root). The name is never granted while the node stands, and never
// reported as held by someone (docs/adr/0178-zk-overlapping-namespaces.md).
var ErrNotALease = errors.New("zksimba: node under the namespace root is not a lease")

// notALease is the error for the node at path.
func notALease(path string) error {
	return fmt.Errorf("%w: %s is a persistent node (another namespace's root or a parent of one, or an application's node): namespaces must not overlap, and nothing else may create nodes under a namespace root", ErrNotALease, path)
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Broadcaster = (*Backend)(nil)
)

// New returns a Backend for the ZooKeeper servers ("host:port" each) that
// keeps its leases under root, a namespace path checked by
// [ValidateRoot] (for example "/simba/myapp"). It connects to nothing
// until [Backend.Open].
func New(servers []string, root string, opts ...Option) (*Backend, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers given", ErrInvalidOption)
	}
	for _, s := range servers {
		if err := checkServer(s); err != nil {
			return nil, err
		}
	}
	if err := ValidateRoot(root); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Backend{
		servers:   append([]string(nil), servers...),
		root:      root,
		cfg:       cfg,
		sessions:  make(map[driver.ID]*zsession),
		delayEnds: make(map[string]time.Time),
		orphans:   make(map[string]struct{}),
		rdial:     make(chan struct{}, 1),
		quit:      make(chan struct{}),
		seen:      inspectCache{nodes: make(map[string]watchedNode)},
	}, nil
}

// checkServer refuses a server address go-zookeeper would dial forever
// without success: it takes "host" or "host:port" (port 2181 if none), and
// a connect string's chroot suffix ("zk1:2181/app", as Java clients take
// it) would be dialled as the port "2181/app" while Open waits for its
// context.
func checkServer(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty server address", ErrInvalidOption)
	case strings.Contains(s, "/"):
		return fmt.Errorf("%w: server %q: a chroot suffix is not supported; give host:port here and the whole path as the root (New(servers, \"/chroot/simba/app\"))", ErrInvalidOption, s)
	case !strings.Contains(s, ":"):
		return nil // go-zookeeper adds :2181
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: server %q: want host or host:port (%w)", ErrInvalidOption, s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%w: server %q: port %q is not a number in [1, 65535]", ErrInvalidOption, s, port)
	}
	return nil
}

// Root is the namespace root the backend's lease nodes live under.
func (b *Backend) Root() string { return b.root }

// Open opens a new ZooKeeper session, asking for req.LeaseDuration as its
// timeout. The server clamps that to its [minSessionTimeout,
// maxSessionTimeout]; the reply's Remaining is 5/12 of the timeout the
// server actually granted. Open creates the namespace root if missing.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if req.LeaseDuration < time.Millisecond || req.LeaseDuration > time.Duration(1<<31-1)*time.Millisecond {
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: lease duration %v out of range [1ms, 2^31ms)", req.LeaseDuration)
	}
	if err := req.Owner.Check(); err != nil {
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: %w", err)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: %w", driver.ErrClosed)
	}
	s, err := b.dialSession(ctx, min(req.LeaseDuration, b.cfg.maxLease), req.Owner)
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: %w", err)
	}
	if t := s.timeout(); t > b.cfg.maxLease {
		// The server's minSessionTimeout is above the cap: a grant the
		// quarantine after a loss would not cover.
		s.closeAsync()
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: %w: the server negotiated a session timeout of %v, more than WithMaxLease(%v) (its minSessionTimeout is above it): raise WithMaxLease or lower minSessionTimeout", ErrInvalidOption, t, b.cfg.maxLease)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.closeAsync()
		return driver.OpenReply{}, fmt.Errorf("zksimba: open: %w", driver.ErrClosed)
	}
	b.sessions[s.id] = s
	b.mu.Unlock()
	b.sweepOrphans(s)
	s.log.Info("zksimba: session opened", "session", s.id, "requested", req.LeaseDuration, "negotiated", s.timeout())
	// Nominal: 5/12 is this backend's rule, so the engine warns only when
	// the server clamped the timeout below the one asked for.
	return driver.OpenReply{ID: s.id, Remaining: Grant(s.timeout()), Nominal: Grant(req.LeaseDuration)}, nil
}

// SessionTimeout is the timeout ZooKeeper negotiated for the open session
// id, as read from the server's last connect response.
func (b *Backend) SessionTimeout(id driver.ID) (time.Duration, bool) {
	s, err := b.lookup(id)
	if err != nil {
		return 0, false
	}
	return s.timeout(), true
}

// lookup finds an open session. An unknown id (never opened here, closed,
// or expired) answers ErrExpired: a session never comes back.
func (b *Backend) lookup(id driver.ID) (*zsession, error) {
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

func (b *Backend) forget(s *zsession) {
	b.mu.Lock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
	b.mu.Unlock()
}

// Renew proves the session alive with one request whatever the number of
// leases: a multi holding a single version check of the namespace root.
// It travels ZooKeeper's write path, so the leader itself checks that the
// session is live (docs/adr/0040-zk-renewal.md). The owned set is kept
// locally, from the backend's own acquisitions and releases and from the
// watch on each of the session's lease nodes.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	s, err := b.lookup(req.ID)
	if err != nil {
		return driver.RenewReply{}, fmt.Errorf("zksimba: renew: %w", err)
	}
	if err := s.renew(ctx); err != nil {
		return driver.RenewReply{}, fmt.Errorf("zksimba: renew %s: %w", s.id, err)
	}
	version, leases := s.ownedSet()
	// Capped as Open caps it: a reconnect to a server with another
	// minSessionTimeout may have negotiated a timeout above WithMaxLease,
	// and a grant above it would outlive the quarantine after a loss.
	reply := driver.RenewReply{Remaining: Grant(min(s.timeout(), s.b.cfg.maxLease)), Version: version}
	if req.KnownVersion != version {
		reply.Full, reply.Leases = true, leases
	}
	return reply, nil
}

// Acquire tries each name with one atomic check-epoch, create-ephemeral
// and stat per name, in parallel on the session's connection. A name held
// by another session gets token 0 and an exists watch, which turns its
// deletion into a [driver.Notice]. Inside the namespace's quarantine after
// a loss, nothing is granted and the reply's Quarantine says how long it
// lasts; a session whose epoch is gone answers [driver.ErrExpired].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if err := b.checkLockDelay(req.LockDelay); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire: %w", err)
	}
	s, err := b.lookup(req.ID)
	if err != nil {
		return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire: %w", err)
	}
	tokFloor := b.maxTok.Load()
	results := make([]driver.AcquireResult, len(req.Names))
	outs := make([]acquired, len(req.Names))
	errs := make([]error, len(req.Names))
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxInFlight)
	for i, name := range req.Names {
		results[i].Name = name
		if err := deadline.ValidateName(name); err != nil {
			results[i].Err = err
			continue
		}
		if len(req.Names) == 1 {
			outs[i], errs[i] = s.acquire(ctx, name, req.LockDelay)
			continue
		}
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			outs[i], errs[i] = s.acquire(ctx, name, req.LockDelay)
		}()
	}
	wg.Wait()
	if s.expired.Load() {
		return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire %s: %w", s.id, driver.ErrExpired)
	}
	if err := errors.Join(errs...); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire %s: %w", s.id, err)
	}
	var quarantine time.Duration
	for i, o := range outs {
		results[i].Token = o.tok
		if o.err != nil {
			results[i].Err = o.err
		}
		quarantine = max(quarantine, o.quarantine)
	}
	if quarantine > 0 {
		// The quarantine ended between two names of the batch: a reply
		// announcing it grants nothing, so the names granted go back.
		var back []driver.Lease
		for i := range results {
			if results[i].Token != 0 {
				back = append(back, driver.Lease{Name: results[i].Name, Token: results[i].Token})
				results[i].Token = 0
			}
		}
		if len(back) > 0 {
			if err := b.Release(ctx, driver.ReleaseRequest{ID: req.ID, Leases: back}); err != nil {
				return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire %s: %w", s.id, err)
			}
		}
		return driver.AcquireReply{Results: results, Quarantine: quarantine}, nil
	}
	var back []driver.Lease
	top := uint64(0)
	for i := range results {
		r := &results[i]
		if r.Token == 0 {
			continue
		}
		if outs[i].fresh && r.Token <= tokFloor {
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
			return driver.AcquireReply{}, fmt.Errorf("zksimba: acquire %s: %w", s.id, err)
		}
	}
	return driver.AcquireReply{Results: results}, nil
}

// Release deletes the lease nodes the session owns under the given tokens.
// A lease whose token is not the one the session owns the name under is
// left alone.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	s, err := b.lookup(req.ID)
	if err != nil {
		if errors.Is(err, driver.ErrExpired) {
			// The session's ephemeral nodes are gone with it: nothing to do.
			return nil
		}
		return fmt.Errorf("zksimba: release: %w", err)
	}
	errs := make([]error, len(req.Leases))
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxInFlight)
	for i, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			errs[i] = err
			continue
		}
		if len(req.Leases) == 1 {
			errs[i] = s.release(ctx, l)
			continue
		}
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			errs[i] = s.release(ctx, l)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zksimba: release %s: %w", s.id, err)
	}
	return nil
}

// Close closes the session's ZooKeeper connection, which ends the session
// at once: the server deletes its ephemeral lease nodes and fires the
// watches of waiting candidates. Closing an unknown or expired session is
// not an error.
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	b.mu.Lock()
	s, ok := b.sessions[id]
	delete(b.sessions, id)
	b.mu.Unlock()
	if !ok {
		return nil
	}
	s.releaseMarked(ctx)
	return s.close(ctx)
}

// Shutdown closes every session the backend has open and waits for its
// goroutines. The backend answers [driver.ErrClosed] afterwards.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		close(b.quit) // a dial in progress gives up (dialRead)
	}
	b.closed = true
	all := make([]*zsession, 0, len(b.sessions))
	for _, s := range b.sessions {
		all = append(all, s)
	}
	clear(b.sessions)
	b.mu.Unlock()
	var errs []error
	for _, s := range all {
		s.releaseMarked(ctx)
		errs = append(errs, s.close(ctx))
	}
	b.closeReadConn()
	// A subscriber still inside its function is waited for, within ctx.
	loopDone := b.notices.shutdown()
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		if loopDone != nil {
			<-loopDone
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("zksimba: shutdown: %w", context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// Subscribe delivers a [driver.Notice] whenever a watched lease node is
// deleted (released, or its owner's session expired at the server), and an
// empty notice when a session reconnects. Watches are armed by failed
// acquisitions, on the session that tried. Notices are queued and fn runs
// on a goroutine of the backend's own, never on go-zookeeper's receive
// loop: a slow fn delays other notices, never a renewal's reply, and fn may
// stop any subscription, its own included.
func (b *Backend) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: Subscribe(nil)", ErrInvalidOption)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("zksimba: subscribe: %w", driver.ErrClosed)
	}
	return b.notices.subscribe(fn), nil
}

func (b *Backend) notify(n driver.Notice) { b.notices.post(n) }

// goTracked runs f on a goroutine that Shutdown waits for, unless the
// backend is shut down (then it reports false and does not run f). The
// check and the Add share b.mu with Shutdown, so no Add races its Wait.
func (b *Backend) goTracked(f func()) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// call runs a blocking go-zookeeper request so that ctx is honoured: the
// caller returns at ctx's end, and the request finishes in the background
// (go-zookeeper ends it at the latest when the connection closes).
func call[T any](ctx context.Context, b *Backend, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	ch := make(chan result, 1)
	if !b.goTracked(func() {
		v, err := f()
		ch <- result{v, err}
	}) {
		return zero, driver.ErrClosed
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}
