package zksimba

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// errSessionGone is what the dialer answers once the session it serves has
// expired or been closed: go-zookeeper would otherwise open a new ZooKeeper
// session on the same *zk.Conn, which must never pass for the old one.
var errSessionGone = errors.New("zksimba: session is over; not reconnecting")

// connectInfo is what a server's connect response says: the session id it
// answered for (0 means expired) and the negotiated timeout.
type connectInfo struct {
	sessionID int64
	timeout   time.Duration
}

// dialer returns the zk.Dialer for one session. Each new TCP connection's
// first reply is ZooKeeper's connect response, which carries the negotiated
// session timeout that go-zookeeper keeps private; sniffConn reads it on
// every (re)connect and hands it to onConnect before go-zookeeper sees the
// reply. Once gone reports true, no connection is dialled at all.
func dialer(base zk.Dialer, gone func() bool, onConnect func(connectInfo)) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if gone() {
			return nil, errSessionGone
		}
		c, err := base(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, onConnect: onConnect}, nil
	}
}

// connectResponseLen is how much of the connect response sniffConn needs:
// length (4), protocolVersion (4), timeOut (4), sessionId (8).
const connectResponseLen = 20

// sniffConn passes everything through and decodes the first
// connectResponseLen bytes read.
type sniffConn struct {
	net.Conn
	onConnect func(connectInfo)

	mu   sync.Mutex
	head []byte
	done bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.sniff(p[:n])
	}
	return n, err
}

func (c *sniffConn) sniff(b []byte) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	need := connectResponseLen - len(c.head)
	if len(b) < need {
		c.head = append(c.head, b...)
		c.mu.Unlock()
		return
	}
	c.head = append(c.head, b[:need]...)
	c.done = true
	info, ok := parseConnectResponse(c.head)
	c.head = nil
	c.mu.Unlock()
	if ok {
		c.onConnect(info)
	}
}

// parseConnectResponse decodes the start of a connect response frame
// (big-endian: int32 length, int32 protocolVersion, int32 timeOut in ms,
// int64 sessionId). ok is false when b is too short or malformed.
func parseConnectResponse(b []byte) (info connectInfo, ok bool) {
	if len(b) < connectResponseLen {
		return connectInfo{}, false
	}
	frame := int32(binary.BigEndian.Uint32(b[0:4]))
	timeoutMs := int32(binary.BigEndian.Uint32(b[8:12]))
	sid := int64(binary.BigEndian.Uint64(b[12:20]))
	if frame < connectResponseLen-4 || timeoutMs < 0 {
		return connectInfo{}, false
	}
	return connectInfo{sessionID: sid, timeout: time.Duration(timeoutMs) * time.Millisecond}, true
}
