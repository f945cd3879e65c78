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
// does not tell other clients when it last heard from a session. Inspect
// reads over one of this Backend's open sessions, or over a short-lived
// connection of its own if none is open.
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
	conn, done, err := b.readConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("zksimba: inspect: %w", err)
	}
	defer done()
	// Tokens count from the namespace's epoch; in a namespace without one
	// (used only by versions before epochs) a token is the raw czxid.
	ep, err := b.loadEpoch(ctx, conn, noCreate)
	if err != nil {
		return nil, fmt.Errorf("zksimba: inspect: epoch of %s: %w", b.root, err)
	}
	if ep == nil {
		ep = &epoch{}
	}
	if len(names) == 0 {
		children, err := call(ctx, b, func() ([]string, error) {
			c, _, err := conn.Children(b.root)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil // no root: nothing held
		}
		if err != nil {
			return nil, fmt.Errorf("zksimba: inspect: list %s: %w", b.root, err)
		}
		for _, c := range children {
			if strings.HasPrefix(c, req.Prefix) && deadline.ValidateName(c) == nil {
				names = append(names, c)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	holders := make([]*driver.Holder, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxInFlight)
	for i, name := range names {
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			holders[i], errs[i] = b.holder(ctx, conn, ep, name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("zksimba: inspect: %w", err)
	}
	out := make([]driver.Holder, 0, len(names))
	for _, h := range holders {
		if h != nil {
			out = append(out, *h)
		}
	}
	return out, nil
}

// holder reads one lease node; nil if it does not exist (the name is free)
// or is not an ephemeral node (not a lease).
func (b *Backend) holder(ctx context.Context, conn *zk.Conn, ep *epoch, name string) (*driver.Holder, error) {
	type res struct {
		data []byte
		st   *zk.Stat
	}
	r, err := call(ctx, b, func() (res, error) {
		data, st, err := conn.Get(b.root + "/" + name)
		return res{data, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	tok, err := ep.token(r.st)
	if r.st.EphemeralOwner == 0 || err != nil || ep.quarantined(r.st.Ctime) > 0 {
		return nil, nil // not a lease, or one that was never granted
	}
	h := &driver.Holder{Name: name, Token: tok, Session: formatID(r.st.EphemeralOwner)}
	if len(r.data) > 0 && r.data[0] == '{' {
		var d leaseData
		if err := json.Unmarshal(r.data, &d); err != nil {
			return nil, fmt.Errorf("lease node %s: %w", name, err)
		}
		h.Owner = d.Owner
		h.Remaining = time.Duration(d.TimeoutMS) * time.Millisecond
	}
	return h, nil
}

// readConn returns a connection to read with: one of the backend's open
// sessions', or a new one that done closes.
func (b *Backend) readConn(ctx context.Context) (conn *zk.Conn, done func(), err error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, nil, driver.ErrClosed
	}
	for _, s := range b.sessions {
		if c := s.conn.Load(); c != nil && !s.isGone() {
			b.mu.Unlock()
			return c, func() {}, nil
		}
	}
	b.mu.Unlock()
	conn, events, err := zk.Connect(b.servers, 10*time.Second,
		zk.WithDialer(b.cfg.dial), zk.WithLogger(zkLogger{b.cfg.logger}), zk.WithLogInfo(false))
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
		}
	}
}
