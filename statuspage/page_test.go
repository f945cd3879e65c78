package statuspage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/statuspage"
	"github.com/simba-go/simba/term"
)

// blackhole is a TCP proxy to a server that can be cut: from then on it
// forwards nothing either way and answers no new connection, as a network
// partition does (calls hang; nothing is refused).
type blackhole struct {
	l      net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackhole{l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *blackhole) addr() string { return p.l.Addr().String() }

func (p *blackhole) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *blackhole) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.cut.Load() {
			p.wg.Add(1)
			go func() { defer p.wg.Done(); _, _ = io.Copy(io.Discard, c) }()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(s)
		p.wg.Add(2)
		go p.pump(s, c)
		go p.pump(c, s)
	}
}

// pump copies src to dst until the proxy is cut, then drops what arrives.
func (p *blackhole) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			_ = dst.Close()
			return
		}
		if p.cut.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			_ = src.Close()
			return
		}
	}
}

func (p *blackhole) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// zkBackend is a backend on a namespace of the test's own under the shared
// ZooKeeper (SIMBA_ZK_SERVERS), through servers.
func zkBackend(t *testing.T, servers []string, root string) *zksimba.Backend {
	t.Helper()
	b, err := zksimba.New(servers, root, zksimba.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	return b
}

// inflight counts the requests for /status.json being served at once.
type inflight struct {
	h         http.Handler
	now, peak atomic.Int32
	delay     atomic.Int64 // added to every /status.json, to play a slow server
	served    atomic.Int32
	arrived   chan struct{} // a request for /status.json arrived
}

func (f *inflight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/status.json" {
		n := f.now.Add(1)
		defer f.now.Add(-1)
		for {
			p := f.peak.Load()
			if n <= p || f.peak.CompareAndSwap(p, n) {
				break
			}
		}
		f.served.Add(1)
		select {
		case f.arrived <- struct{}{}:
		default:
		}
		if d := time.Duration(f.delay.Load()); d > 0 {
			<-time.After(d)
		}
	}
	f.h.ServeHTTP(w, r)
}

// TestPageInHeadlessChromium drives the page in a real headless browser on
// real ZooKeeper (whose tokens are above 2^53): the holder with its host,
// pid, version, token exact to the digit, since when it holds; a group's
// partitions without listing them; a handover among the transitions; then
// the page's backend cut off: every /status.json still answers within the
// inspection bound, the page says the backend is not answering and shows
// the holders last seen as stale, and it never has two requests in flight.
// Screenshots of both states are saved (SIMBA_ARTIFACTS, else the test's
// temporary directory).
func TestPageInHeadlessChromium(t *testing.T) {
	zk := os.Getenv("SIMBA_ZK_SERVERS")
	if zk == "" {
		t.Fatal("SIMBA_ZK_SERVERS is not set: start the test servers and source .services/env (scripts/services.sh)")
	}
	servers := strings.Split(zk, ",")
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/simba-test/statuspage-" + hex.EncodeToString(rnd[:])
	init := zkBackend(t, servers, root)
	ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := init.Init(ictx); err != nil { // a new namespace: no quarantine to wait out
		t.Fatal(err)
	}

	a := node(t, zkBackend(t, servers, root), "node-a", map[string]string{"host": "host-a", "pid": "101", "version": "v1.4.2"})
	bn := node(t, zkBackend(t, servers, root), "node-b", map[string]string{"host": "host-b", "pid": "202", "version": "v1.5.0"})
	proxy := newBlackhole(t, servers[0])
	watcher := node(t, zkBackend(t, []string{proxy.addr()}, root), "watcher", nil)

	ea := lead(t, a, "billing")
	tokA := ea.Term().Token()
	if tokA <= 1<<53 {
		t.Fatalf("ZooKeeper token %d is not above 2^53: the test cannot show the page keeps it exact", tokA)
	}
	g, err := group.Join(a, "orders", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Leave(context.Background()) }()
	wonB := make(chan *term.Term, 1)
	eb, err := election.Start(bn, "billing", election.WithListener(election.Funcs{Elected: func(t *term.Term) { wonB <- t }}))
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()

	page := newPage(t, watcher, statuspage.Watch("billing"), statuspage.WatchGroup("orders", 4))
	counted := &inflight{h: page, arrived: make(chan struct{}, 1000)}
	srv := httptest.NewServer(counted)
	defer srv.Close()
	probe := httptest.NewServer(page) // the test's own requests, not counted
	defer probe.Close()

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector('#holders').textContent.includes('node-a')`, "#holders")
	waitFor(t, ctx, `document.querySelector('.group-summary') && document.querySelector('.group-summary').textContent.includes('4 of 4 partitions owned')`, "#groups")

	holders := text(t, ctx, "#holders")
	for _, want := range []string{"billing", "node-a", "host-a", "101", "v1.4.2", strconv.FormatUint(tokA, 10), "held when the page started"} {
		if !strings.Contains(holders, want) {
			t.Errorf("holders show %q, want %q", holders, want)
		}
	}
	// The exact token, read by the page's own JavaScript from the JSON: a
	// JSON number would have come out as a rounded float.
	tokCell, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#holders td.num')].map(td=>td.textContent)[0]`))
	if err != nil {
		t.Fatal(err)
	}
	if tokCell != strconv.FormatUint(tokA, 10) {
		t.Fatalf("the page shows token %s, want %d exactly", tokCell, tokA)
	}
	groups := text(t, ctx, "#groups")
	for _, want := range []string{"Group orders", "1 members", "node-a", "host-a", "0, 1, 2, 3"} {
		if !strings.Contains(groups, want) {
			t.Errorf("the group shows %q, want %q", groups, want)
		}
	}
	screenshot(t, ctx, "statuspage-healthy")

	// A handover: the page shows node-b holding since it saw it take over,
	// and the transition.
	if err := ea.StepDown(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	var tb *term.Term
	select {
	case tb = <-wonB:
	case <-time.After(30 * time.Second):
		t.Fatal("node-b was not elected within 30s of the step-down")
	}
	tokB := strconv.FormatUint(tb.Token(), 10)
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('#holders').textContent.includes(%q)`, tokB), "#holders")
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('#transitions').textContent.includes('node-b #'+%q)`, tokB), "#transitions")
	holders = text(t, ctx, "#holders")
	if !strings.Contains(holders, "host-b") || !strings.Contains(holders, "v1.5.0") || strings.Contains(holders, "held when the page started") {
		t.Errorf("after the handover the holders show %q, want node-b (host-b, v1.5.0) held since the page saw it", holders)
	}

	// A slow server: the page never asks twice at once.
	counted.peak.Store(0)
	counted.delay.Store(int64(2500 * time.Millisecond))
	for len(counted.arrived) > 0 {
		<-counted.arrived
	}
	for range 3 { // three slow answers: the old page sent five requests meanwhile
		select {
		case <-counted.arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the page stopped polling")
		}
	}
	counted.delay.Store(0)
	if p := counted.peak.Load(); p != 1 {
		t.Fatalf("%d requests for /status.json in flight at once from one page, want 1", p)
	}

	// The page's backend cut off.
	proxy.cut.Store(true)
	for i := range 4 {
		start := time.Now()
		st, _ := getStatus(t, probe.URL)
		took := time.Since(start)
		if took > statuspage.DefaultInspectTimeout+1500*time.Millisecond { // slack for a loaded machine; the old page took 5s
			t.Fatalf("/status.json %d with the backend down took %v, want within the inspection bound (%v)", i, took, statuspage.DefaultInspectTimeout)
		}
		if i > 0 && (st.Backend.OK || !st.Backend.Stale || len(st.Holders) == 0) {
			t.Fatalf("/status.json %d with the backend down: backend %+v, %d holders; want not OK, stale, the holders last seen", i, st.Backend, len(st.Holders))
		}
	}
	counted.peak.Store(0)
	waitFor(t, ctx, `document.querySelector('#backend').textContent.startsWith('Backend not answering')`, "#backend")
	waitFor(t, ctx, `document.querySelectorAll('#holders tr.stale').length > 0`, "#holders")
	if got := text(t, ctx, "#backend"); !strings.Contains(got, "as of") {
		t.Errorf("the backend line says %q, want when the holders shown were read", got)
	}
	if !strings.Contains(text(t, ctx, "#holders"), tokB) {
		t.Errorf("with the backend down the holders show %q, want the last seen (token %s)", text(t, ctx, "#holders"), tokB)
	}
	screenshot(t, ctx, "statuspage-backend-down")
	if p := counted.peak.Load(); p > 1 {
		t.Fatalf("%d requests in flight at once with the backend down, want 1", p)
	}
}
