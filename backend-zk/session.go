package zksimba

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// zsession is one ZooKeeper session: one *zk.Conn and what the backend
// knows about the leases it owns and the watches it has armed.
type zsession struct {
	b    *Backend
	log  *slog.Logger // never reassigned: callbacks read it concurrently
	conn atomic.Pointer[zk.Conn]

	id        driver.ID              // set once Open has the session
	ep        *epoch                 // the namespace epoch the session lives in; set with id
	data      []byte                 // the data of its lease nodes (leaseData); set with id
	sid       atomic.Int64           // ZooKeeper session id from the first connect response
	timeoutNs atomic.Int64           // negotiated timeout from the latest connect response
	passwd    atomic.Pointer[[]byte] // the session's password, from the first connect response

	expired atomic.Bool // ZooKeeper expired the session
	closed  atomic.Bool // Close was called
	ready   chan struct{}
	gone    chan struct{} // closed on expiry or close
	had     atomic.Bool   // the connection has had its session once
	goneMu  sync.Once
	readyMu sync.Once

	// qSeen is the latest server time the session saw inside its epoch's
	// quarantine (a lease node's ctime, ms) and when its reply arrived on
	// the local monotonic clock: enough to answer Acquire without a request
	// until the quarantine is about over. Guarded by mu.
	qSeen struct {
		serverMS int64
		at       time.Time
	}

	mu        sync.Mutex
	owned     map[string]uint64          // lease name → token (epoch.token of its node)
	marked    map[string]struct{}        // owned names whose term has a lock-delay marker
	version   uint64                     // version of owned; bumped on every change
	armed     map[string]bool            // names with an exists watch armed on the server → the node is not a lease (persistent)
	uncertain map[string]struct{}        // names whose create or own-watch failed without a known outcome
	lastRenew time.Time                  // when the last successful renewal (or Open) was called
	watchdog  atomic.Pointer[time.Timer] // fires timeout after lastRenew: fireWatchdog
}

func formatID(sid int64) driver.ID {
	return driver.ID(fmt.Sprintf("0x%016x", uint64(sid)))
}

func (b *Backend) dialSession(ctx context.Context, lease time.Duration, owner driver.Owner) (*zsession, error) {
	calledAt := time.Now()
	s := &zsession{
		b:         b,
		log:       b.cfg.logger,
		ready:     make(chan struct{}),
		gone:      make(chan struct{}),
		owned:     make(map[string]uint64),
		marked:    make(map[string]struct{}),
		version:   1,
		armed:     make(map[string]bool),
		uncertain: make(map[string]struct{}),
	}
	stall := &stallPolicy{timeout: func() time.Duration {
		if t := s.timeout(); t > 0 {
			return t
		}
		return lease // until the first connect response
	}}
	hosts := newHosts()
	conn, _, err := zk.Connect(b.servers, lease,
		zk.WithHostProvider(hosts),
		zk.WithDialer(dialer(stallDialer(b.cfg.dial, hosts, stall, s.log), s.isGone, s.onConnect)),
		// The event channel drops events when full; the callback does not.
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{s.log}),
		zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	s.conn.Store(conn)
	select {
	case <-s.ready:
	case <-s.gone:
		s.closeAsync()
		return nil, fmt.Errorf("session ended while connecting: %w", driver.ErrExpired)
	case <-ctx.Done():
		s.closeAsync()
		return nil, fmt.Errorf("connecting to %v: %w", b.servers, context.Cause(ctx))
	case <-b.quit:
		// Shutdown does not know of a session that is not registered yet:
		// without this the connection redials until ctx ends, forever
		// for a context without a deadline (as dialRead, ADR 0159).
		s.closeAsync()
		return nil, fmt.Errorf("connecting to %v: %w", b.servers, driver.ErrClosed)
	}
	s.id = formatID(s.sid.Load())
	// Every lease node says who holds it, for Inspect.
	if s.data, err = json.Marshal(leaseData{Session: s.id, Owner: owner, TimeoutMS: s.timeout().Milliseconds()}); err != nil {
		s.closeAsync()
		return nil, err
	}
	s.mu.Lock()
	s.lastRenew = calledAt
	s.watchdog.Store(time.AfterFunc(time.Until(calledAt.Add(s.timeout())), s.fireWatchdog))
	s.mu.Unlock()
	if s.isGone() {
		s.stopWatchdog()
	}
	if b.cfg.user != "" {
		if _, err := call(ctx, b, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(b.cfg.user+":"+b.cfg.password))
		}); err != nil {
			s.closeAsync()
			return nil, fmt.Errorf("digest auth: %w", err)
		}
	}
	// Reading the root's epoch record also checks the credentials: ones
	// that cannot read the root would fail every renewal with "not
	// authenticated", which looks transient; say it now, for good.
	ep, err := b.loadEpoch(ctx, conn, b.quarantine())
	if err != nil {
		err = s.classify(err) // before closing: a closed session classifies as closed
		s.closeAsync()
		return nil, err
	}
	s.ep = ep
	return s, nil
}

func (s *zsession) isGone() bool { return s.expired.Load() || s.closed.Load() }

func (s *zsession) timeout() time.Duration { return time.Duration(s.timeoutNs.Load()) }

// onConnect sees every connect response before go-zookeeper does.
func (s *zsession) onConnect(info connectInfo) {
	first := s.sid.Load()
	switch {
	case info.sessionID == 0:
		// The server no longer knows the session: it has expired.
		if first != 0 {
			s.markExpired("server answered the reconnect with an expired session")
		}
	case first == 0 && s.sid.CompareAndSwap(0, info.sessionID):
		s.timeoutNs.Store(int64(info.timeout))
		if info.passwd != nil {
			s.passwd.Store(&info.passwd)
		}
	case info.sessionID != s.sid.Load():
		// Never expected (the dialer stops after expiry), but a different
		// session on this connection must never pass for ours.
		s.markExpired(fmt.Sprintf("connection switched to session %#x", info.sessionID))
	default:
		if old := s.timeout(); info.timeout != old {
			// Servers that clamp timeouts differently: a shorter timeout
			// can end the session on the server before a grant made under
			// the longer one ends (ADR 0138's assumptions).
			s.log.Warn("zksimba: the reconnect negotiated another session timeout: give every server of the ensemble the same tickTime, minSessionTimeout and maxSessionTimeout",
				"session", formatID(first), "before", old, "now", info.timeout)
		}
		s.timeoutNs.Store(int64(info.timeout))
	}
}

func (s *zsession) onEvent(ev zk.Event) {
	switch ev.Type {
	case zk.EventSession:
		switch ev.State {
		case zk.StateHasSession:
			if !s.had.Swap(true) {
				s.readyMu.Do(func() { close(s.ready) })
				return
			}
			s.log.Info("zksimba: reconnected", "session", formatID(s.sid.Load()), "server", ev.Server, "negotiated", s.timeout())
			// go-zookeeper re-sets the watches, but if that failed a name
			// would never be watched again: forget them, so the next failed
			// attempt arms its watch anew (a duplicate fires once, too). An
			// empty notice makes every waiting candidate try now.
			s.mu.Lock()
			clear(s.armed)
			s.mu.Unlock()
			s.b.notify(driver.Notice{})
		case zk.StateExpired:
			s.markExpired("go-zookeeper reported StateExpired")
		}
	case zk.EventNodeDeleted, zk.EventNodeCreated, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
		name, ok := s.leaseName(ev.Path)
		if !ok {
			return
		}
		s.mu.Lock()
		delete(s.armed, name)
		tok, own := s.owned[name]
		if own && ev.Type == zk.EventNodeDeleted {
			delete(s.owned, name)
			delete(s.marked, name)
			s.version++
		}
		s.mu.Unlock()
		switch {
		case ev.Type == zk.EventNodeDeleted:
			s.b.notify(driver.Notice{Name: name})
		case own:
			// Something else fired (and used up) the watch on our own
			// node: arm it again so a deletion is still seen.
			s.watchOwn(name, tok)
		}
	case zk.EventNotWatching:
		s.mu.Lock()
		clear(s.armed)
		s.mu.Unlock()
	}
}

func (s *zsession) leaseName(path string) (string, bool) {
	root := s.b.root
	if len(path) <= len(root)+1 || !strings.HasPrefix(path, root) || path[len(root)] != '/' {
		return "", false
	}
	name := path[len(root)+1:]
	return name, !strings.Contains(name, "/")
}

func (s *zsession) markExpired(why string) {
	if !s.expired.CompareAndSwap(false, true) {
		return
	}
	if !s.closed.Load() {
		s.log.Warn("zksimba: session expired", "session", formatID(s.sid.Load()), "why", why)
	}
	s.goneMu.Do(func() { close(s.gone) })
	s.stopWatchdog()
	if c := s.conn.Load(); c != nil {
		// Close from another goroutine: this may run on go-zookeeper's
		// own loop, which Close waits for. Before forget: a Shutdown that
		// refuses the goroutine took s from the sessions in the same
		// critical section and closes it itself; after forget it would
		// not know of s, and the connection would redial forever.
		s.b.goTracked(c.Close)
	}
	s.b.forget(s)
	s.b.orphaned(s)
}

// stopWatchdog stops the timer without taking mu (markExpired may run
// with mu held).
func (s *zsession) stopWatchdog() {
	if w := s.watchdog.Load(); w != nil {
		w.Stop()
	}
}

// closeAsync closes the session without waiting: go-zookeeper's Close
// waits up to a second for the server to confirm, which an Open that
// failed or timed out must not add to its caller's wait.
func (s *zsession) closeAsync() {
	if !s.b.goTracked(func() { _ = s.close(context.Background()) }) {
		_ = s.close(context.Background()) // shut down: nobody else will
	}
}

func (s *zsession) close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.goneMu.Do(func() { close(s.gone) })
	s.stopWatchdog()
	c := s.conn.Load()
	if c == nil {
		return nil
	}
	// Not through call: Shutdown closes sessions after refusing new
	// tracked goroutines.
	done := make(chan struct{})
	go func() {
		defer close(done)
		// go-zookeeper's Close sends closeSession only over a connection
		// that is up at that moment: after a pause, its connection is often
		// being torn down or redialled, the close is dropped, and the
		// session (and its leases) lives until the server expires it, up to
		// a whole timeout later (after a revival on reconnect). So the
		// session is also closed over a fresh connection of its own, at the
		// same time (docs/adr/0139-zk-close-over-a-live-connection.md).
		raw := make(chan struct{})
		go func() {
			defer close(raw)
			if !s.expired.Load() {
				s.closeOverFreshConn()
			}
		}()
		c.Close()
		<-raw
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("zksimba: close %s: %w", s.id, context.Cause(ctx))
	}
}

// closeOverFreshConn ends the session at the server over a connection of
// its own (see close), trying every server in turn until one answers that
// the session is over, for at most the session timeout (past it the server
// expires the session anyway) and at most maxRawClose, so that Shutdown
// does not wait long for servers that are down.
func (s *zsession) closeOverFreshConn() {
	sid, pw := s.sid.Load(), s.passwd.Load()
	if sid == 0 || pw == nil {
		return // never had a session, or its password is unknown
	}
	timeout := s.timeout()
	end := time.Now().Add(min(timeout, maxRawClose))
	wait := min(max(timeout/4, 200*time.Millisecond), 2*time.Second)
	for time.Now().Before(end) {
		for _, addr := range s.b.servers {
			done, err := closeSessionRaw(s.b.cfg.dial, addr, sid, *pw, timeout, min(wait, time.Until(end)))
			if done {
				return
			}
			s.log.Debug("zksimba: closing the session over a fresh connection", "session", formatID(sid), "server", addr, "err", err)
			if !time.Now().Before(end) {
				return
			}
		}
		t := time.NewTimer(50 * time.Millisecond)
		<-t.C
	}
}

// maxRawClose bounds closeOverFreshConn: after a pause the servers answer
// at once; a server that is down does not need the close (its sessions
// expire with it, or at the others after the timeout).
const maxRawClose = 3 * time.Second

// classify turns a go-zookeeper error into what the engine expects.
func (s *zsession) classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrSessionExpired):
		s.markExpired("request answered session expired")
		return fmt.Errorf("%w (%w)", driver.ErrExpired, err)
	case s.expired.Load():
		return fmt.Errorf("%w (%w)", driver.ErrExpired, err)
	case s.closed.Load():
		return fmt.Errorf("%w (%w)", driver.ErrClosed, err)
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%w on %s (%w)", ErrNotAuthorized, s.b.root, err)
	}
	return err
}

// renew sends the one renewal request; see Backend.Renew. A request lost
// to a dropped connection is sent again (go-zookeeper queues it until it
// has reconnected, to the same session) until ctx ends: a renewal proves
// the session alive whenever it succeeds, so a retry is as good as the
// first try.
func (s *zsession) renew(ctx context.Context) error {
	calledAt := time.Now()
	if err := s.resolve(ctx); err != nil {
		return err
	}
	conn := s.conn.Load()
	check := &zk.CheckVersionRequest{Path: s.ep.path, Version: -1}
	for attempt := 0; ; attempt++ {
		_, err := call(ctx, s.b, func() ([]zk.MultiResponse, error) { return conn.Multi(check) })
		switch {
		case err == nil:
			return s.renewed(calledAt)
		case errors.Is(err, zk.ErrNoNode):
			return s.epochGone()
		case s.transient(err):
			if err := s.pause(ctx, attempt); err != nil {
				return err
			}
		default:
			return s.classify(err)
		}
	}
}

// epochGone ends a session whose namespace epoch vanished (the root
// deleted, the ensemble rebuilt from empty disks): its records are lost,
// so it answers ErrExpired, and the engine's next Open finds the loss and
// starts the quarantine (docs/adr/0130-quarantine-after-data-loss.md).
func (s *zsession) epochGone() error {
	s.markExpired("the namespace epoch " + s.ep.path + " is gone: the namespace lost its records")
	return fmt.Errorf("%w: namespace epoch %s is gone (records lost)", driver.ErrExpired, s.ep.path)
}

// renewed records a successful renewal called at calledAt: the watchdog
// now fires no earlier than calledAt + the negotiated timeout. If the
// watchdog has already fired, the session is over and the renewal must not
// be reported as a success.
func (s *zsession) renewed(calledAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isGone() {
		return s.classify(errSessionGone)
	}
	if calledAt.After(s.lastRenew) {
		s.lastRenew = calledAt
	}
	s.watchdog.Load().Reset(time.Until(s.lastRenew.Add(s.timeout())))
	return nil
}

// fireWatchdog ends a session that Simba has not renewed for the whole
// negotiated timeout. go-zookeeper's own pings would keep the ZooKeeper
// session alive for as long as the connection lasts, so without this a
// stuck process that keeps its connection would hold its leases forever
// (docs/adr/0042-zk-watchdog.md).
func (s *zsession) fireWatchdog() {
	s.mu.Lock()
	if left := time.Until(s.lastRenew.Add(s.timeout())); left > 0 {
		// A renewal raced with the timer: wait for the rest.
		s.watchdog.Load().Reset(left)
		s.mu.Unlock()
		return
	}
	// Under mu, so that a renewal finishing now sees it (renewed).
	s.markExpired("not renewed within the negotiated session timeout; closing it")
	s.mu.Unlock()
}

// transient reports whether err is a lost connection after which the same
// request may be sent again on the same session.
func (s *zsession) transient(err error) bool {
	return !s.isGone() && (errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer))
}

// pause waits a little before sending a request again after a lost
// connection, or returns why not.
func (s *zsession) pause(ctx context.Context, attempt int) error {
	d := time.Duration(attempt+1) * 20 * time.Millisecond
	if d > 200*time.Millisecond {
		d = 200 * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.gone:
		return s.classify(errSessionGone)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// resolve settles names whose outcome the session does not know (a create
// whose reply was lost, or an own node whose watch could not be armed):
// the rare path, one exists-with-watch per name.
func (s *zsession) resolve(ctx context.Context) error {
	s.mu.Lock()
	names := make([]string, 0, len(s.uncertain))
	for n := range s.uncertain {
		names = append(names, n)
	}
	s.mu.Unlock()
	conn, sid := s.conn.Load(), s.sid.Load()
	for _, name := range names {
		type res struct {
			ok bool
			st *zk.Stat
		}
		r, err := call(ctx, s.b, func() (res, error) {
			ok, st, _, err := conn.ExistsW(s.b.root + "/" + name)
			return res{ok, st}, err
		})
		if err != nil {
			return s.classify(err)
		}
		ours := r.ok && r.st.EphemeralOwner == sid
		var got uint64
		if ours {
			// Created by a create whose reply was lost, or a lock-delay
			// probe whose delete failed: a lease only if a grant made it
			// and it would have been granted (past the quarantine, a
			// sound token).
			a, err := s.foundOwn(ctx, name, r.st)
			if err != nil {
				return err
			}
			got, ours = a.tok, a.tok != 0
		}
		s.mu.Lock()
		delete(s.uncertain, name)
		tok, own := s.owned[name]
		switch {
		case ours:
			if !own || tok != got {
				s.owned[name] = got
				s.version++
			}
		case own:
			delete(s.owned, name)
			delete(s.marked, name)
			s.version++
		}
		s.mu.Unlock()
	}
	return nil
}

// grant decides whether the session's new lease node (its stat as the
// server wrote it) is a term: its token, or 0 and either the quarantine
// left after the node's creation time (server clock) or why not.
func (s *zsession) grant(st *zk.Stat) (tok uint64, quarantine time.Duration, err error) {
	if q := s.ep.quarantined(st.Ctime); q > 0 {
		s.mu.Lock()
		if st.Ctime > s.qSeen.serverMS {
			s.qSeen.serverMS, s.qSeen.at = st.Ctime, time.Now()
		}
		s.mu.Unlock()
		return 0, q, nil
	}
	tok, err = s.ep.token(st)
	return tok, 0, err
}

// quarantineLeft is the quarantine still ahead by the latest server time
// seen inside it plus the local time since (an estimate that only decides
// whether to ask the server: grant checks every node's own ctime), or 0
// when it may be over (then a request is due).
func (s *zsession) quarantineLeft() time.Duration {
	if s.ep.until == 0 {
		return 0
	}
	s.mu.Lock()
	seen, at := s.qSeen.serverMS, s.qSeen.at
	s.mu.Unlock()
	if seen == 0 {
		return 0
	}
	est := seen + time.Since(at).Milliseconds()
	// Ask again a little before the estimated end: the server's answer is
	// the one that counts, and a late ask only delays the first grant.
	if left := s.ep.quarantined(est); left > 50*time.Millisecond {
		return left
	}
	return 0
}

// drop deletes the session's own lease node that is not to be a term (made
// inside the quarantine, or with a token that fails its checks). The data
// version is the one the acquiring multi's setData left (1), so a node
// made by anyone since is left alone. marked: the acquiring multi created
// the name's lock-delay marker too, which goes with the node (a node never
// a term leaves no delay).
func (s *zsession) drop(ctx context.Context, name string, st *zk.Stat, marked bool) error {
	conn := s.conn.Load()
	_, err := call(ctx, s.b, func() (struct{}, error) {
		if marked {
			_, err := conn.Multi(
				&zk.DeleteRequest{Path: s.b.root + "/" + name, Version: st.Version},
				&zk.DeleteRequest{Path: s.b.markerPath(name), Version: 0})
			if err == nil {
				return struct{}{}, nil
			}
		}
		return struct{}{}, conn.Delete(s.b.root+"/"+name, st.Version)
	})
	if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return nil
	}
	s.mu.Lock()
	s.uncertain[name] = struct{}{} // the next renewal tries again
	s.mu.Unlock()
	return s.classify(err)
}

func (s *zsession) ownedSet() (uint64, []driver.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	leases := make([]driver.Lease, 0, len(s.owned))
	for n, t := range s.owned {
		leases = append(leases, driver.Lease{Name: n, Token: t})
	}
	slices.SortFunc(leases, func(a, b driver.Lease) int { return strings.Compare(a.Name, b.Name) })
	return s.version, leases
}

// acquired is the outcome of one name's acquisition: a token, or 0 and
// either the quarantine left (server clock) or the result's error.
type acquired struct {
	tok        uint64
	quarantine time.Duration
	err        error
	// fresh: tok comes from a create this call sent (not from a node found
	// the session's, which an earlier call may have created before replies
	// this call's token floor includes).
	fresh bool
}

// made makes a node of ours a term, or deletes it. marked: the multi that
// made it also created the name's lock-delay marker.
func (s *zsession) made(ctx context.Context, name string, st *zk.Stat, marked bool) (acquired, error) {
	tok, q, err := s.grant(st)
	if tok == 0 {
		if derr := s.drop(ctx, name, st, marked); derr != nil {
			return acquired{}, derr
		}
		return acquired{quarantine: q, err: err}, nil
	}
	s.mu.Lock()
	s.owned[name] = tok
	if marked {
		s.marked[name] = struct{}{}
	}
	s.version++
	delete(s.uncertain, name)
	s.mu.Unlock()
	return acquired{tok: tok}, nil
}

// acquire tries one name: see Backend.Acquire and
// docs/adr/0041-zk-leases.md. The multi checks the session's epoch node
// first, so no node is created once the namespace lost its records, and
// requires the name's lock-delay marker absent (creating it for a delay,
// or creating and deleting it for none); a marker found without the lease
// node is a term ended without a release (afterEnd).
func (s *zsession) acquire(ctx context.Context, name string, delay time.Duration) (acquired, error) {
	path := s.b.root + "/" + name
	s.mu.Lock()
	tok, own := s.owned[name]
	_, unsure := s.uncertain[name]
	s.mu.Unlock()
	if own {
		return acquired{tok: tok}, nil
	}
	if q := s.quarantineLeft(); q > 0 {
		return acquired{quarantine: q}, nil
	}
	conn, sid, acl := s.conn.Load(), s.sid.Load(), s.b.cfg.acl
	data := s.data
	mpath := s.b.markerPath(name)
	// check epoch + create + marker + setData in one multi: the setData's
	// reply carries the new node's Stat (czxid, ctime, ephemeralOwner) in
	// the same round trip.
	ops := []any{
		&zk.CheckVersionRequest{Path: s.ep.path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: acl, Flags: zk.FlagEphemeral},
	}
	if delay > 0 {
		ops = append(ops, &zk.CreateRequest{Path: mpath, Data: markerData(delay, s.id), Acl: acl})
	} else {
		// No delay of its own: only the check that no earlier term's
		// marker stands (created and deleted: absent before and after).
		ops = append(ops, &zk.CreateRequest{Path: mpath, Acl: acl}, &zk.DeleteRequest{Path: mpath, Version: 0})
	}
	ops = append(ops, &zk.SetDataRequest{Path: path, Data: data, Version: 0})
	const markerOp = 2
	churn, lost := 0, 0
	for churn < 3 {
		res, err := s.runMulti(ctx, ops...)
		var st *zk.Stat
		if err == nil {
			if st = res[len(res)-1].Stat; st == nil {
				return acquired{}, fmt.Errorf("create %s: multi answered without a stat", path)
			}
		}
		switch {
		case failedOp(err) == markerOp && errors.Is(err, zk.ErrNodeExists):
			// The lease node is absent, the marker of a term with a delay
			// stands: that term ended without a release.
			a, again, err := s.afterEnd(ctx, name, delay, false)
			if err != nil || !again {
				return a, err
			}
			churn++
			continue
		case failedOp(err) == markerOp && errors.Is(err, zk.ErrNoNode):
			// No marker directory yet (a namespace from before lock-delays).
			if err := s.ensureDelayDir(ctx); err != nil {
				return acquired{}, err
			}
			churn++
			continue
		case err == nil:
			if st.EphemeralOwner != sid || st.Czxid <= 0 {
				// The node we just created must be ours; if not, do not
				// make it a term.
				return acquired{}, fmt.Errorf("create %s: node owned by %#x with czxid %d, not by this session", path, st.EphemeralOwner, st.Czxid)
			}
			a, err := s.made(ctx, name, st, delay > 0)
			if a.tok != 0 {
				s.watchOwn(name, a.tok)
			}
			a.fresh = true
			return a, err
		case errors.Is(err, zk.ErrNodeExists):
			s.mu.Lock()
			foreign, armed := s.armed[name]
			if armed && !unsure {
				s.mu.Unlock()
				// The watch says the node is still the one read last time.
				if foreign {
					return acquired{err: notALease(path)}, nil
				}
				return acquired{}, nil
			}
			s.armed[name] = false // before the request: the event may beat our reading of the reply
			s.mu.Unlock()
			type res struct {
				ok bool
				st *zk.Stat
			}
			r, err := call(ctx, s.b, func() (res, error) {
				ok, st, _, err := conn.ExistsW(path)
				return res{ok, st}, err
			})
			if err != nil {
				s.mu.Lock()
				delete(s.armed, name)
				s.mu.Unlock()
				if s.transient(err) {
					if err := s.pause(ctx, lost); err != nil {
						return acquired{}, err
					}
					lost++
					continue
				}
				return acquired{}, s.classify(err)
			}
			if !r.ok {
				churn++
				continue // deleted in between: try to create again
			}
			if r.st.EphemeralOwner == sid {
				// Ours from a create whose reply was lost: a grant's, or a
				// lock-delay probe's (foundOwn tells).
				return s.foundOwn(ctx, name, r.st)
			}
			if r.st.EphemeralOwner == 0 {
				// A lease node is ephemeral: this one is another
				// namespace's root or parent, or an application's node.
				// Never "held by someone": that would read as held forever.
				s.mu.Lock()
				if _, ok := s.armed[name]; ok {
					s.armed[name] = true
				}
				s.mu.Unlock()
				return acquired{err: notALease(path)}, nil
			}
			return acquired{}, nil
		case errors.Is(err, zk.ErrNoNode):
			// The check failed: the epoch is gone (a create under a missing
			// root would fail too, but the check comes first).
			return acquired{}, s.epochGone()
		default:
			// The create may or may not have happened: a retry's
			// NodeExists is then checked against our session id, and if we
			// give up, the next renewal finds out (resolve).
			unsure = true
			s.mu.Lock()
			s.uncertain[name] = struct{}{}
			s.mu.Unlock()
			if !s.transient(err) {
				return acquired{}, s.classify(err)
			}
			if err := s.pause(ctx, lost); err != nil {
				return acquired{}, err
			}
			lost++
		}
	}
	return acquired{}, nil
}

// watchOwn arms an exists watch on the session's own lease node, in the
// background (it is not needed before Acquire returns), so that a deletion
// by anyone else drops the lease from the owned set.
func (s *zsession) watchOwn(name string, tok uint64) {
	conn, sid := s.conn.Load(), s.sid.Load()
	s.b.goTracked(func() {
		ok, st, _, err := conn.ExistsW(s.b.root + "/" + name)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			if !s.isGone() {
				s.uncertain[name] = struct{}{}
			}
			return
		}
		if (!ok || st.EphemeralOwner != sid || s.ep.of(st.Czxid) != tok) && s.owned[name] == tok {
			delete(s.owned, name)
			delete(s.marked, name)
			s.version++
		}
	})
}

// release deletes one lease node if the session owns it under l.Token.
func (s *zsession) release(ctx context.Context, l driver.Lease) error {
	path := s.b.root + "/" + l.Name
	s.mu.Lock()
	tok, own := s.owned[l.Name]
	_, marked := s.marked[l.Name]
	s.mu.Unlock()
	if own && tok != l.Token {
		return nil // a stale release: the session owns a later term
	}
	mpath := s.b.markerPath(l.Name)
	conn, sid := s.conn.Load(), s.sid.Load()
	// blind: the node is in the owned set, which the watch on it keeps
	// current, so it is this term's node. Otherwise (a lost acquisition
	// reply, or a retry after a lost connection, when the first delete
	// may have happened and someone else may own the name now) delete only
	// after checking owner and czxid.
	blind := own
	for attempt := 0; ; attempt++ {
		_, err := call(ctx, s.b, func() (struct{}, error) {
			if !blind {
				// The first delete may have landed and someone else may
				// have created the node since, while this connection's
				// server lags: a read without sync would show this
				// session's old node and the delete below would remove the
				// new holder's. After sync the server has applied both.
				if _, err := conn.Sync(path); err != nil {
					return struct{}{}, err
				}
				ok, st, err := conn.Exists(path)
				if err != nil || !ok || st.EphemeralOwner != sid || s.ep.of(st.Czxid) != l.Token {
					return struct{}{}, err
				}
			}
			if marked {
				// The marker goes with the node: while the session's node
				// stands, the name's marker is its term's (a grant requires
				// none; only a candidate that finds the node gone touches
				// one), and a release skips the delay.
				_, err := conn.Multi(&zk.DeleteRequest{Path: path, Version: -1}, &zk.DeleteRequest{Path: mpath, Version: -1})
				if !errors.Is(err, zk.ErrNoNode) {
					return struct{}{}, err
				}
				// The node or the marker is gone: the node alone.
			}
			return struct{}{}, conn.Delete(path, -1)
		})
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			break
		}
		if s.transient(err) {
			blind = false
			if err := s.pause(ctx, attempt); err != nil {
				return err
			}
			continue
		}
		err = s.classify(err)
		if errors.Is(err, driver.ErrExpired) {
			return nil // the node went with the session
		}
		return err
	}
	s.mu.Lock()
	if t, ok := s.owned[l.Name]; ok && t == l.Token {
		delete(s.owned, l.Name)
		delete(s.marked, l.Name)
		s.version++
	}
	delete(s.uncertain, l.Name)
	s.mu.Unlock()
	return nil
}
