package zksimba

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

var _ driver.Inspector = (*Backend)(nil)

// leaseData is the data of a lease node: who holds it. Nodes written by
// earlier releases hold only the session id as text.
type leaseData struct {
	Session driver.ID    `json:"session"`
	Owner   driver.Owner `json:"owner,omitzero"`
	// TimeoutMS is the holder's negotiated session timeout.
	TimeoutMS int64 `json:"timeout_ms"`
}

// Inspect implements [driver.Inspector]: it reads the lease nodes (a
// prefix lists the namespace root's children). A lease node is ephemeral,
// so it exists only while its holder's ZooKeeper session lives. Remaining
// is the holder's negotiated session timeout, an upper bound: ZooKeeper
// does not tell other clients when it last heard from a session.
//
// Inspect reads over the Backend's own read connection, never over a
// session's: thousands of reads queued on a session's connection would
// delay its pings and renewals (docs/adr/0159-zk-inspect-reads.md). It
// starts with a sync, so that it sees every write acknowledged before it
// began, then reads the epoch (the root's record and identity node). A
// lease node is read with a watch and not read again until the watch
// fires (the node deleted or its data changed), and the root's children
// are listed with a watch likewise: a settled group's poll is three
// requests whatever its size, and a poll after changes reads the changed
// nodes only. Tokens and the epoch's rules are applied to the nodes' stats
// at every Inspect, cached or not.
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	names := slices.Clone(req.Names)
	for _, n := range names {
		if err := deadline.ValidateName(n); err != nil {
			return nil, fmt.Errorf("zksimba: inspect: %w", err)
		}
	}
	if len(names) == 0 && req.Prefix != "" {
		if err := deadline.ValidateName(req.Prefix); err != nil {
			return nil, fmt.Errorf("zksimba: inspect prefix: %w", err)
		}
	}
	conn, err := b.inspectConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("zksimba: inspect: %w", err)
	}
	// After the sync, every watch that a change acknowledged before this
	// Inspect began fires has fired: ZooKeeper sends a watch's event
	// before the replies that follow the change on the connection, and
	// go-zookeeper delivers it before it hands over the next reply. That
	// holds on one connection only: after a reconnect, go-zookeeper sets
	// the old watches again beside new requests, so what was read before
	// a disconnection (an older gen) is read again.
	gen := b.rgen.Load()
	if _, err := call(ctx, b, func() (string, error) { return conn.Sync(b.root) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("zksimba: inspect: sync %s: %w", b.root, err)
	}
	// Tokens count from the namespace's epoch; in a namespace without one
	// (used only by versions before epochs) a token is the raw czxid.
	ep, rootSt, err := b.loadEpochStat(ctx, conn, noCreate)
	if err != nil {
		return nil, fmt.Errorf("zksimba: inspect: epoch of %s: %w", b.root, err)
	}
	if rootSt == nil {
		return nil, nil // no root: nothing held
	}
	if ep == nil {
		ep = &epoch{}
	}
	cache := &b.seen
	var children []string // sorted, nil if not listed
	now := b.rgen.Load()  // what was read on this connection since the last reconnect
	cache.mu.Lock()
	if cache.childWatch != nil && cache.childGen == now && !fired(cache.childWatch) {
		children = cache.children
	}
	cache.mu.Unlock()
	if len(names) == 0 {
		if children == nil {
			type listed struct {
				names []string
				watch <-chan zk.Event
			}
			l, err := call(ctx, b, func() (listed, error) {
				c, _, w, err := conn.ChildrenW(b.root)
				return listed{c, w}, err
			})
			if errors.Is(err, zk.ErrNoNode) {
				return nil, nil
			}
			if err != nil {
				return nil, fmt.Errorf("zksimba: inspect: list %s: %w", b.root, err)
			}
			children = slices.Sorted(slices.Values(l.names))
			cache.mu.Lock()
			cache.children, cache.childWatch, cache.childGen = children, l.watch, gen
			// A child was created or deleted: drop what can never be
			// used again (nodes deleted since, or read before a reconnect).
			cache.sweep(now)
			cache.mu.Unlock()
		}
		for _, c := range children {
			if strings.HasPrefix(c, req.Prefix) && deadline.ValidateName(c) == nil {
				names = append(names, c)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	nodes := make([]*leaseNode, len(names))
	var toRead []int
	cache.mu.Lock()
	for i, name := range names {
		if w, ok := cache.nodes[name]; ok {
			if w.gen == now && !fired(w.watch) {
				nodes[i] = w.node
				continue
			}
			delete(cache.nodes, name)
		}
		if children != nil {
			if _, listed := slices.BinarySearch(children, name); !listed {
				nodes[i] = absentNode
				continue
			}
		}
		toRead = append(toRead, i)
	}
	if len(cache.nodes)+len(toRead) > maxWatchedNodes {
		cache.sweep(now) // dead entries must not take the room of live ones
	}
	room := maxWatchedNodes - len(cache.nodes)
	cache.mu.Unlock()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxInFlight)
	for k, i := range toRead {
		watch := k < room
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			nodes[i], errs[i] = b.readLease(ctx, conn, names[i], watch)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("zksimba: inspect: %w", err)
	}
	cache.mu.Lock()
	for _, i := range toRead {
		if n := nodes[i]; n.watch != nil {
			cache.nodes[names[i]] = watchedNode{node: n, watch: n.watch, gen: gen}
		}
	}
	cache.mu.Unlock()
	out := make([]driver.Holder, 0, len(names))
	for i, n := range nodes {
		h, err := n.holder(names[i], ep)
		if err != nil {
			return nil, fmt.Errorf("zksimba: inspect: %w", err)
		}
		if h != nil {
			out = append(out, *h)
		}
	}
	return out, nil
}

// maxWatchedNodes bounds the lease nodes Inspect keeps (and watches);
// nodes past it are read at every Inspect.
const maxWatchedNodes = 1 << 16

// inspectCache is what Inspect read over the read connection and has not
// seen change since: each entry is valid until its watch fires (which
// go-zookeeper also does, with EventNotWatching, when the read session
// expires or the connection closes), and only while the connection it
// was read on has not lost its server since (its gen is the Backend's
// rgen).
type inspectCache struct {
	mu         sync.Mutex
	children   []string        // the root's children, sorted
	childWatch <-chan zk.Event // nil: not listed
	childGen   uint64
	nodes      map[string]watchedNode
}

type watchedNode struct {
	node  *leaseNode
	watch <-chan zk.Event
	gen   uint64
}

// sweep drops the entries Inspect can no longer use: their watch fired
// (the node was deleted or changed, or the read session expired) or they
// were read before the read connection's generation now. Without it a
// name that is gone keeps its entry until asked for again, and such
// entries fill maxWatchedNodes. c.mu held.
func (c *inspectCache) sweep(now uint64) {
	for name, w := range c.nodes {
		if w.gen != now || fired(w.watch) {
			delete(c.nodes, name)
		}
	}
}

// fired reports whether a watch has fired. go-zookeeper sends one event
// and closes the channel, so once fired it stays fired.
func fired(w <-chan zk.Event) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}

// leaseNode is a child of the root as read: its stat and data. A node's
// ephemeral owner and creation (czxid, ctime) never change while it
// exists; Simba writes its data once, in the multi that creates it.
type leaseNode struct {
	st   zk.Stat
	data []byte
	// watch fires when the node is deleted or its data changes (nil: read
	// without a watch).
	watch <-chan zk.Event
}

// absentNode stands for a name whose node did not exist.
var absentNode = &leaseNode{}

// readLease reads one lease node, with a watch if watch; absentNode if it
// does not exist.
func (b *Backend) readLease(ctx context.Context, conn *zk.Conn, name string, watch bool) (*leaseNode, error) {
	path := b.root + "/" + name
	n, err := call(ctx, b, func() (*leaseNode, error) {
		if watch {
			data, st, w, err := conn.GetW(path)
			if err != nil {
				return nil, err
			}
			return &leaseNode{st: *st, data: data, watch: w}, nil
		}
		data, st, err := conn.Get(path)
		if err != nil {
			return nil, err
		}
		return &leaseNode{st: *st, data: data}, nil
	})
	if errors.Is(err, zk.ErrNoNode) {
		return absentNode, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return n, nil
}

// holder is the lease n stands for under the epoch ep: nil if the name
// is free, the node is not ephemeral (not a lease), or it was never
// granted (from before the epoch, or created in its quarantine). Applied
// at every Inspect, to cached nodes too.
func (n *leaseNode) holder(name string, ep *epoch) (*driver.Holder, error) {
	if n == absentNode {
		return nil, nil
	}
	tok, err := ep.token(&n.st)
	if n.st.EphemeralOwner == 0 || err != nil || ep.quarantined(n.st.Ctime) > 0 {
		return nil, nil // not a lease, or one that was never granted
	}
	h := &driver.Holder{Name: name, Token: tok, Session: formatID(n.st.EphemeralOwner)}
	if len(n.data) > 0 && n.data[0] == '{' {
		var d leaseData
		if err := json.Unmarshal(n.data, &d); err != nil {
			return nil, fmt.Errorf("lease node %s: %w", name, err)
		}
		h.Owner = d.Owner
		h.Remaining = time.Duration(d.TimeoutMS) * time.Millisecond
	}
	return h, nil
}

// inspectConn returns the Backend's read connection, dialling it on first
// use; Shutdown closes it. It has a ZooKeeper session of its own (which
// go-zookeeper replaces if it expires) and carries no lease: nothing but
// reads queue on it, and nothing a session does waits behind them.
func (b *Backend) inspectConn(ctx context.Context) (*zk.Conn, error) {
	if c := b.rconn.Load(); c != nil {
		return c, nil
	}
	select {
	case b.rdial <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-b.rdial }()
	if c := b.rconn.Load(); c != nil {
		return c, nil
	}
	// Every change of the connection's state (a disconnection first)
	// moves rgen on: what was read before is read again.
	conn, done, err := b.dialRead(ctx, func(ev zk.Event) {
		if ev.Type == zk.EventSession {
			b.rgen.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		done()
		return nil, driver.ErrClosed
	}
	b.rconn.Store(conn)
	b.mu.Unlock()
	return conn, nil
}

// closeReadConn closes the read connection, if one was dialled. After
// b.closed is set (inspectConn stores none after that).
func (b *Backend) closeReadConn() {
	b.mu.Lock()
	c := b.rconn.Swap(nil)
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// dialRead dials a new connection to read with, which done closes;
// onEvent, if not nil, sees its events.
func (b *Backend) dialRead(ctx context.Context, onEvent zk.EventCallback) (conn *zk.Conn, done func(), err error) {
	// The dial is one of the Backend's goroutines: Shutdown ends it
	// (quit) and waits for it, so no connection outlives Shutdown.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, nil, driver.ErrClosed
	}
	b.wg.Add(1)
	b.mu.Unlock()
	defer b.wg.Done()
	if onEvent == nil {
		onEvent = func(zk.Event) {}
	}
	const timeout = 10 * time.Second
	stall := &stallPolicy{timeout: func() time.Duration { return timeout }}
	hosts := newHosts()
	conn, events, err := zk.Connect(b.servers, timeout, zk.WithHostProvider(hosts),
		zk.WithDialer(stallDialer(b.cfg.dial, hosts, stall, b.cfg.logger)), zk.WithLogger(zkLogger{b.cfg.logger}), zk.WithLogInfo(false),
		zk.WithEventCallback(onEvent))
	if err != nil {
		return nil, nil, err
	}
	closeConn := func() {
		if !b.goTracked(conn.Close) {
			conn.Close()
		}
	}
	// Wait for the connection's session.
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, nil, errors.New("connection closed before it had a session")
			}
			if ev.State != zk.StateHasSession {
				continue
			}
			// go-zookeeper never blocks on a full event channel and
			// closes it with the connection: nothing to drain.
			if b.cfg.user != "" {
				if _, err := call(ctx, b, func() (struct{}, error) {
					return struct{}{}, conn.AddAuth("digest", []byte(b.cfg.user+":"+b.cfg.password))
				}); err != nil {
					closeConn()
					return nil, nil, fmt.Errorf("digest auth: %w", err)
				}
			}
			return conn, closeConn, nil
		case <-ctx.Done():
			closeConn()
			return nil, nil, context.Cause(ctx)
		case <-b.quit:
			closeConn()
			return nil, nil, driver.ErrClosed
		}
	}
}
