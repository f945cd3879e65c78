package zksimba

import (
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Stalled servers (docs/adr/0177-zk-stalled-server.md). A server that
// stops (SIGSTOP, a frozen VM, a long GC pause) keeps its sockets open:
// go-zookeeper notices only when a read has waited its receive timeout, 2/3
// of the session timeout, which is past the 5/12 a renewal grants, so the
// term ends although the rest of the ensemble serves. ZooKeeper answers
// every request of a connection, in order, so a request unanswered for a
// small share of the session timeout means the server is not serving: the
// backend closes that connection and go-zookeeper moves the session to
// the next server, where the renewal is sent again.

// StallDivisor sets how long a request may go unanswered before the
// backend closes the connection: the session timeout divided by it (300 ms
// for a 3 s session, 1 s for 10 s), seen at the first tick of a quarter
// of it past that. A renewal left unanswered then still has time to be
// sent again elsewhere before the engine's deadline: the engine renews at
// least twice per grant (5/12 of the timeout), so 0.083 of the timeout is
// left at least (ADR 0223).
const StallDivisor = 10

// minStallLimit is the shortest stall limit: below it a busy server's
// ordinary latency would look like a stall.
const minStallLimit = 50 * time.Millisecond

// stallPolicy is a session's limit on unanswered requests. Each stall
// within one session timeout of the previous doubles the limit (at most
// go-zookeeper's own receive timeout): a server that is slow rather than
// stopped, or an ensemble slow everywhere, gets its answer in the end
// instead of having every connection closed early.
type stallPolicy struct {
	timeout func() time.Duration // the session timeout (asked for until negotiated)

	mu      sync.Mutex
	strikes int
	last    time.Time // when the last stall was seen
}

// limit is how long a request may wait for its answer now.
func (p *stallPolicy) limit() time.Duration {
	t := p.timeout()
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) > t {
		p.strikes = 0
	}
	return stallLimit(t, p.strikes)
}

// stallLimit is the limit for a session timeout of timeout after strikes
// stalls in a row: timeout/StallDivisor doubled per strike, within
// [minStallLimit, 2/3 timeout].
func stallLimit(timeout time.Duration, strikes int) time.Duration {
	d := timeout / StallDivisor
	for i := 0; i < strikes && d < timeout; i++ {
		d *= 2
	}
	return max(min(d, timeout*2/3), minStallLimit)
}

func (p *stallPolicy) stalled() {
	p.mu.Lock()
	p.strikes++
	p.last = time.Now()
	p.mu.Unlock()
}

// stallDialer wraps base so that every connection it dials is closed when
// a request on it goes unanswered for the policy's limit, and tells hosts
// so: the redial that follows a stall is not delayed.
func stallDialer(base zk.Dialer, hosts *hostList, p *stallPolicy, log *slog.Logger) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := base(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &stallConn{Conn: c, addr: address, p: p, hosts: hosts, log: log}, nil
	}
}

// hostList is the host provider of one *zk.Conn: go-zookeeper's own
// (it resolves every server name once), except that the redial after a
// stall close never waits. go-zookeeper sleeps a second whenever its
// round of addresses starts again, which with one address is every
// redial: a standalone server paused 600 ms under a 3 s session had its
// connection closed at 300 ms and redialled only at 1.3 s, past the
// grant of 1.25 s, where its own answer would have come in time; and one
// address may stand for a whole ensemble behind a load balancer, where
// the redial reaches another server (ADR 0222).
type hostList struct {
	*zk.DNSHostProvider
	quick atomic.Bool // a stall closed the connection: redial at once
}

func newHosts() *hostList { return &hostList{DNSHostProvider: zk.NewDNSHostProvider()} }

// Next is the DNS provider's, without the round-start wait right after a
// stall close.
func (h *hostList) Next() (string, bool) {
	server, retryStart := h.DNSHostProvider.Next()
	if quick := h.quick.Swap(false); retryStart && quick {
		retryStart = false
	}
	return server, retryStart
}

// stallConn tracks the requests written on a ZooKeeper connection and the
// replies read, by their frames (int32 length, then the payload, whose
// first int32 is the xid: -1 marks a watch event, which answers nothing;
// the first reply is the connect response). When the oldest request has
// waited the limit, it closes the connection.
//
// The wait is measured by a timer ticking every quarter of the limit
// while a request is pending. A tick that comes late (more than two
// quarters after the one before) means this process did not run (itself
// stopped, a frozen VM, starved of CPU): the answers may be sitting
// unread in its socket, so the server's silence was not observed, and
// every pending request's wait starts again at that tick. Without this a
// client stopped for longer than the limit closed a connection whose
// server had answered (ADR 0223).
type stallConn struct {
	net.Conn
	addr  string
	p     *stallPolicy
	hosts *hostList
	log   *slog.Logger

	mu      sync.Mutex
	pending []time.Time // when each unanswered request was written (or its wait restarted), oldest first
	timer   *time.Timer
	ticking bool      // the timer is set
	tick    time.Time // when the timer was set last
	closed  bool
	wr, rd  frameScanner
}

func (c *stallConn) Write(b []byte) (int, error) {
	// Counted before the write: a write that blocks (the server's window
	// full) must be timed too.
	c.mu.Lock()
	now := time.Now()
	c.wr.scan(b, func([4]byte, int) { c.pending = append(c.pending, now) })
	c.armLocked(now)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *stallConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		c.rd.scan(b[:n], func(head [4]byte, size int) {
			if size >= 4 && int32(binary.BigEndian.Uint32(head[:])) == -1 {
				return // a watch event
			}
			if len(c.pending) > 0 {
				c.pending = c.pending[1:]
			}
		})
		if len(c.pending) == 0 && c.ticking {
			c.timer.Stop()
			c.ticking = false
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *stallConn) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.ticking = false
	c.mu.Unlock()
	return c.Conn.Close()
}

// stallStep is the timer's period for limit.
func stallStep(limit time.Duration) time.Duration { return max(limit/4, time.Millisecond) }

// armLocked sets the timer if a request is pending and it is not set.
func (c *stallConn) armLocked(now time.Time) {
	if c.closed || c.ticking || len(c.pending) == 0 {
		return
	}
	c.ticking, c.tick = true, now
	step := stallStep(c.p.limit())
	if c.timer == nil {
		c.timer = time.AfterFunc(step, c.check)
		return
	}
	c.timer.Reset(step)
}

// check is the timer's tick: it closes the connection if its oldest
// request has waited the limit while this process was running.
func (c *stallConn) check() {
	c.mu.Lock()
	if c.closed || !c.ticking || len(c.pending) == 0 {
		c.ticking = false
		c.mu.Unlock()
		return
	}
	now := time.Now()
	limit := c.p.limit()
	step := stallStep(limit)
	if now.Sub(c.tick) > 2*step {
		// Late: this process was not running. Restart every wait.
		for i := range c.pending {
			c.pending[i] = now
		}
	}
	c.tick = now
	age := now.Sub(c.pending[0])
	if age < limit {
		c.timer.Reset(step)
		c.mu.Unlock()
		return
	}
	c.ticking = false
	n := len(c.pending)
	c.mu.Unlock()
	c.p.stalled()
	c.hosts.quick.Store(true)
	c.log.Warn("zksimba: the server left a request unanswered: closing the connection so that the session moves to another server",
		"server", c.addr, "waited", age.Round(time.Millisecond), "unanswered", n, "limit", limit)
	_ = c.Close()
}

// frameScanner splits a byte stream into ZooKeeper frames, keeping the
// first four bytes of each payload.
type frameScanner struct {
	size  [4]byte // the frame's length prefix, as far as read
	sn    int
	head  [4]byte // the payload's first bytes, as far as read
	hn    int
	left  int // payload bytes still to come
	total int // the payload's length
}

// scan feeds b, calling frame once per frame, when its last byte has
// been fed, with the payload's first bytes and the payload's length.
func (f *frameScanner) scan(b []byte, frame func(head [4]byte, size int)) {
	for len(b) > 0 {
		if f.sn < 4 {
			k := copy(f.size[f.sn:], b)
			f.sn += k
			b = b[k:]
			if f.sn < 4 {
				return
			}
			f.total = int(int32(binary.BigEndian.Uint32(f.size[:])))
			f.left, f.hn = max(f.total, 0), 0
			if f.left == 0 {
				f.sn = 0
				frame(f.head, 0)
			}
			continue
		}
		k := min(len(b), f.left)
		if f.hn < 4 {
			f.hn += copy(f.head[f.hn:], b[:k])
		}
		f.left -= k
		b = b[k:]
		if f.left == 0 {
			f.sn = 0
			frame(f.head, f.total)
		}
	}
}
