// Package tcpproxy is an in-process TCP proxy on loopback for fault tests:
// it forwards to one server and can add latency, cut the link silently (a
// partition: bytes are dropped, nothing is refused) and kill connections.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	latency time.Duration
	cut     bool
	closed  bool
	clients int // client connections open
	wg      sync.WaitGroup
}

// New listens on a free 127.0.0.1 port and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded, both ways, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Cut starts (true) or heals (false) a partition. While cut, new
// connections are accepted but never reach the server and bytes in both
// directions are dropped, as on a dead link: clients see timeouts, not
// refusals. Healing closes the connections that lived through the cut
// (their streams lost bytes), so clients reconnect.
func (p *Proxy) Cut(on bool) {
	p.mu.Lock()
	p.cut = on
	p.mu.Unlock()
	if !on {
		p.KillConns()
	}
}

// KillConns closes every open connection (clients see a reset).
func (p *Proxy) KillConns() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.KillConns()
	p.wg.Wait()
	return err
}

// Clients is the number of client connections open through the proxy:
// which server a client is connected to, when it dials each through its
// own proxy.
func (p *Proxy) Clients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clients
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) state() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency, p.cut
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.mu.Lock()
		p.clients++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.untrack(client)
		p.mu.Lock()
		p.clients--
		p.mu.Unlock()
	}()
	if _, cut := p.state(); cut {
		// A dead link: read and drop until the client gives up or the
		// cut heals (KillConns closes us).
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// pipe copies src to dst, chunk by chunk, applying latency and cuts.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			lat, cut := p.state()
			if lat > 0 {
				time.Sleep(lat)
				_, cut = p.state()
			}
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
