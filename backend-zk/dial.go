package zksimba

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
// answered for (0 means expired), the negotiated timeout, and the
// session's password (nil if the frame did not carry one), which lets the
// backend close the session over a connection of its own.
type connectInfo struct {
	sessionID int64
	timeout   time.Duration
	passwd    []byte
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

// connectResponseLen is how much of the connect response sniffConn needs
// at least: length (4), protocolVersion (4), timeOut (4), sessionId (8).
// The password follows (int32 length, bytes; 16 bytes from every server).
const connectResponseLen = 20

// maxConnectSniff bounds what sniffConn keeps of a connect response: the
// fixed part and a password of up to 32 bytes.
const maxConnectSniff = connectResponseLen + 4 + 32

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
	c.head = append(c.head, b[:min(len(b), maxConnectSniff-len(c.head))]...)
	if len(c.head) < connectResponseLen || len(c.head) < connectSniffLen(c.head) {
		c.mu.Unlock()
		return
	}
	c.done = true
	info, ok := parseConnectResponse(c.head)
	c.head = nil
	c.mu.Unlock()
	if ok {
		c.onConnect(info)
	}
}

// connectSniffLen is how many bytes of the connect response in head
// sniffConn waits for: the whole frame, at most maxConnectSniff, at least
// connectResponseLen. head has at least 4 bytes.
func connectSniffLen(head []byte) int {
	frame := int64(int32(binary.BigEndian.Uint32(head[0:4])))
	return int(min(max(frame+4, connectResponseLen), maxConnectSniff))
}

// parseConnectResponse decodes the start of a connect response frame
// (big-endian: int32 length, int32 protocolVersion, int32 timeOut in ms,
// int64 sessionId, then the password as int32 length and bytes). ok is
// false when b is too short or malformed; a password that b does not hold
// whole is left out.
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
	info = connectInfo{sessionID: sid, timeout: time.Duration(timeoutMs) * time.Millisecond}
	if len(b) >= connectResponseLen+4 && int(frame) >= connectResponseLen {
		n := int32(binary.BigEndian.Uint32(b[20:24]))
		if n > 0 && int(n) <= len(b)-24 && 24+int(n) <= int(frame)+4 {
			info.passwd = append([]byte(nil), b[24:24+n]...)
		}
	}
	return info, true
}

// closeSessionRaw ends the ZooKeeper session sid over a new connection to
// addr, dialled with dial: a connect request that reattaches the session
// (its id and password; lastZxidSeen 0, which every server accepts), then
// a closeSession request, as a client library would send them. It reports
// done when the session is over at the server: closed here, or already
// gone (the server answered the reattach with session 0).
func closeSessionRaw(dial zk.Dialer, addr string, sid int64, passwd []byte, timeout time.Duration, wait time.Duration) (done bool, err error) {
	conn, err := dial("tcp", addr, wait)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
		return false, err
	}
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd (int32 length + bytes); framed by an int32 length.
	req := make([]byte, 4, 4+4+8+4+8+4+len(passwd))
	req = binary.BigEndian.AppendUint32(req, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(sid))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	binary.BigEndian.PutUint32(req[0:4], uint32(len(req)-4))
	if _, err := conn.Write(req); err != nil {
		return false, err
	}
	resp, err := readFrame(conn)
	if err != nil {
		return false, fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 {
		return false, fmt.Errorf("connect response of %d bytes", len(resp))
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != sid {
		// 0: the server no longer knows the session (expired or closed).
		return got == 0, nil
	}
	// closeSession: xid 1, type opClose (-11), no body.
	closeReq := binary.BigEndian.AppendUint32(nil, 8)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 1)
	op := opCloseSession // a variable: its two's complement goes on the wire
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(op))
	if _, err := conn.Write(closeReq); err != nil {
		return false, err
	}
	for {
		// Reply header: xid, zxid, err. Skip watch events (xid -1) and
		// anything else until our xid's answer.
		hdr, err := readFrame(conn)
		if err != nil {
			return false, fmt.Errorf("close reply: %w", err)
		}
		if len(hdr) < 16 {
			return false, fmt.Errorf("close reply of %d bytes", len(hdr))
		}
		if int32(binary.BigEndian.Uint32(hdr[0:4])) != 1 {
			continue
		}
		if code := int32(binary.BigEndian.Uint32(hdr[12:16])); code != 0 {
			return false, fmt.Errorf("closeSession answered error %d", code)
		}
		return true, nil
	}
}

// opCloseSession is ZooKeeper's closeSession opcode.
const opCloseSession int32 = -11

// readFrame reads one length-prefixed ZooKeeper frame (at most 1 MiB).
func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(n[:]))
	if size < 0 || size > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}
