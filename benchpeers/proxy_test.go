package main

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"
)

// The delay proxy keeps the bytes of each direction in order and delays
// each round trip by at least its two one-way delays (less what the
// overshoot estimate takes back, at most half of each).
func TestProxyDelaysEachWayAndKeepsOrder(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	}()
	const delay = 2 * time.Millisecond
	lns, err := listenProxy("127.0.0.1:0="+echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer lns[0].Close()
	c, err := net.Dial("tcp", lns[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	// Bursts of three writes before reading: order must hold across them.
	var lat []time.Duration
	for i := 0; i < 30; i++ {
		start := time.Now()
		for j := 0; j < 3; j++ {
			if _, err := fmt.Fprintf(c, "%d-%d\n", i, j); err != nil {
				t.Fatal(err)
			}
		}
		for j := 0; j < 3; j++ {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d-%d\n", i, j); line != want {
				t.Fatalf("got %q, want %q: order lost", line, want)
			}
		}
		lat = append(lat, time.Since(start))
	}
	if p50 := quantile(lat, 0.5); p50 < 2*delay-delay || p50 > 2*delay+20*time.Millisecond {
		t.Errorf("round trip p50 %v through a proxy of %v each way", p50, delay)
	}
	if lo := quantile(lat, 0); lo < delay {
		t.Errorf("fastest round trip %v: less than one one-way delay (%v)", lo, delay)
	}
}
