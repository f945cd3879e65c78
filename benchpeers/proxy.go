package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// The delay proxy: the kernel here has no netem, so a round trip is
// simulated by forwarding TCP with a fixed one-way delay in each
// direction, bytes kept in order. It runs as a process of its own (this
// program with -proxy), so that its CPU is not counted as the client's.
//
// Go's timers cannot sleep less than about a millisecond when the
// process is otherwise idle (the runtime's poller waits in whole
// milliseconds), so each direction's writer runs on a locked OS thread
// with a 1 ns timer slack and sleeps with nanosleep, less its measured
// overshoot: the median delay lands on the target without spinning.

type chunk struct {
	at  time.Time
	buf []byte // nil: the reader saw the end of the stream
}

// serveProxy forwards every listen=target route with delay each way,
// until killed.
func serveProxy(routes string, delay time.Duration) error {
	if _, err := listenProxy(routes, delay); err != nil {
		return err
	}
	select {}
}

// listenProxy starts forwarding every listen=target route with delay
// each way; closing the listeners stops accepting.
func listenProxy(routes string, delay time.Duration) ([]net.Listener, error) {
	var lns []net.Listener
	for _, r := range strings.Split(routes, ",") {
		listen, target, ok := strings.Cut(r, "=")
		if !ok {
			return lns, fmt.Errorf("proxy route %q: want listen=target", r)
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return lns, err
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go proxyConn(c.(*net.TCPConn), target, delay)
			}
		}()
	}
	return lns, nil
}

func proxyConn(client *net.TCPConn, target string, delay time.Duration) {
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	server := s.(*net.TCPConn)
	_ = client.SetNoDelay(true)
	_ = server.SetNoDelay(true)
	done := make(chan struct{}, 2)
	go pipe(client, server, delay, done)
	go pipe(server, client, delay, done)
	<-done
	<-done
	_ = client.Close()
	_ = server.Close()
}

// pipe copies src to dst, each read delivered delay after it was read.
func pipe(src, dst *net.TCPConn, delay time.Duration, done chan<- struct{}) {
	if delay <= 0 {
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
		done <- struct{}{}
		return
	}
	ch := make(chan chunk, 4096)
	go func() {
		// One read buffer, each chunk copied to its own slice: a fresh
		// 64 KiB buffer per read would make the proxy's garbage collector
		// part of every round trip.
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now(), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				ch <- chunk{at: time.Now()}
				return
			}
		}
	}()
	over := 20 * time.Microsecond // the estimated overshoot of a nanosleep
	for c := range ch {
		due := c.at.Add(delay)
		if rem := time.Until(due) - over; rem > 0 {
			// The slack of whichever thread runs this goroutine now.
			_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 29 /* PR_SET_TIMERSLACK */, 1, 0)
			ts := syscall.NsecToTimespec(int64(rem))
			_ = syscall.Nanosleep(&ts, nil)
			late := time.Since(due)
			over += late / 8 // move the estimate an eighth of the error
			over = min(max(over, 0), delay/2)
		}
		if c.buf == nil {
			_ = dst.CloseWrite()
			break
		}
		if _, err := dst.Write(c.buf); err != nil {
			_ = src.Close()
			break
		}
	}
	// Drain, so the reader never blocks on a full channel.
	go func() {
		for range ch {
		}
	}()
	done <- struct{}{}
}

// proxyProc is a running delay proxy process.
type proxyProc struct {
	cmd   *exec.Cmd
	delay time.Duration // one way
}

func startProxy(delay time.Duration) (*proxyProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := exec.Command(self, "-proxy", strings.Join(proxyRoutes(), ","), "-proxy-delay", delay.String())
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, err
	}
	go func() { _ = c.Wait() }()
	p := &proxyProc{cmd: c, delay: delay}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", portEcho+proxyOffset))
		if err == nil {
			_ = conn.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("delay proxy not listening after 10 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the proxy's listener, bounded
	}
}

func (p *proxyProc) stop() { stopProc(p.cmd) }

// echoRTT is the p50 and p90 round trip of n one-line exchanges with the
// echo server at addr.
func echoRTT(addr string, n int) (p50, p90 time.Duration, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetNoDelay(true)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(c)
	lat := make([]time.Duration, 0, n)
	line := []byte("ping\n")
	for range n {
		t := time.Now()
		if _, err := c.Write(line); err != nil {
			return 0, 0, err
		}
		if _, err := r.ReadBytes('\n'); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t))
	}
	return quantile(lat, 0.5), quantile(lat, 0.9), nil
}

// calibratedProxy starts the proxy so that the echo's p50 round trip
// through it is rtt (within 5 %, three tries): the veth pair's and the
// proxy's own time are part of the round trip, not added to it.
func calibratedProxy(ctx context.Context, rtt time.Duration) (*proxyProc, string, error) {
	direct, _, err := echoRTT(fmt.Sprintf("%s:%d", nsAddr, portEcho), 300)
	if err != nil {
		return nil, "", fmt.Errorf("echo in the namespace: %w", err)
	}
	delay := rtt / 2
	var last string
	for try := 0; try < 4; try++ {
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		p, err := startProxy(delay)
		if err != nil {
			return nil, "", err
		}
		p50, p90, err := echoRTT(fmt.Sprintf("127.0.0.1:%d", portEcho+proxyOffset), 500)
		if err != nil {
			p.stop()
			return nil, "", err
		}
		last = fmt.Sprintf("echo round trip through the proxy p50 %s µs, p90 %s µs (target %s µs; one-way delay set %s µs; %s µs without the proxy)",
			micros(p50), micros(p90), micros(rtt), micros(delay), micros(direct))
		off := p50 - rtt
		if off < 0 {
			off = -off
		}
		if off <= rtt/20 || try == 3 {
			return p, last, nil
		}
		p.stop()
		delay += (rtt - p50) / 2
		if delay < 0 {
			return nil, "", errors.New("delay proxy: the round trip without delay already exceeds the target: " + last)
		}
	}
	return nil, "", errors.New("unreachable")
}
