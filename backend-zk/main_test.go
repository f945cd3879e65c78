package zksimba_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder())
	}
	if os.Getenv(busyEnv) != "" {
		os.Exit(runBusyClient())
	}
	goleak.VerifyTestMain(m)
}

// servers reads a server list from the environment variable name (set by
// `make services`), failing the test loudly when it is missing.
func servers(t testing.TB, name string) []string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run `make services` and `. .services/env` (ZooKeeper tests need a real server)", name)
	}
	return strings.Split(v, ",")
}

func standalone(t testing.TB) []string { return servers(t, "SIMBA_ZK_SERVERS") }
func ensemble(t testing.TB) []string   { return servers(t, "SIMBA_ZK_ENSEMBLE") }

// newRoot is a namespace of its own for one test.
func newRoot(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.Map(func(r rune) rune {
		if r < 128 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 100 {
		name = name[:100]
	}
	return "/simba-test/" + name + "-" + hex.EncodeToString(b[:])
}

// newBackend returns a backend for root, initialised: test roots are new,
// and without it their first use would wait one MaxLease. Not Init: on
// servers started just before the tests, Init refuses (the ensemble holds
// no node older than MaxLease); and not ForceInit, whose wait for the
// epoch's first token second would add up to a second to every test
// (InitForTest says why that is sound here).
func newBackend(t testing.TB, srv []string, root string, opts ...zksimba.Option) *zksimba.Backend {
	t.Helper()
	b := newBackendNoInit(t, srv, root, opts...)
	if err := zksimba.InitForTest(ctxT(t, 10*time.Second), b); err != nil {
		t.Fatalf("InitForTest: %v", err)
	}
	return b
}

// newBackendNoInit returns a backend for root without initialising the
// namespace.
func newBackendNoInit(t testing.TB, srv []string, root string, opts ...zksimba.Option) *zksimba.Backend {
	t.Helper()
	// Quiet by default: session-opened lines would bury test output and
	// break benchmark result lines.
	level := slog.LevelWarn
	if _, bench := t.(*testing.B); bench {
		level = slog.LevelError + 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	b, err := zksimba.New(srv, root, append([]zksimba.Option{zksimba.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, b *zksimba.Backend, lease time.Duration) driver.OpenReply {
	t.Helper()
	r, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

func acquire(t testing.TB, b *zksimba.Backend, id driver.ID, names ...string) []driver.AcquireResult {
	t.Helper()
	r, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: id, Names: names})
	if err != nil {
		t.Fatalf("Acquire(%v): %v", names, err)
	}
	if len(r.Results) != len(names) {
		t.Fatalf("Acquire(%v): %d results", names, len(r.Results))
	}
	return r.Results
}

func renew(t testing.TB, b *zksimba.Backend, id driver.ID) driver.RenewReply {
	t.Helper()
	r, err := b.Renew(ctxT(t, 10*time.Second), driver.RenewRequest{ID: id})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return r
}

// notices subscribes to b and returns a channel of the notices for name
// (and empty ones are dropped).
func notices(t testing.TB, b *zksimba.Backend, name string) <-chan driver.Notice {
	t.Helper()
	ch := make(chan driver.Notice, 64)
	stop, err := b.Subscribe(func(n driver.Notice) {
		if n.Name == name {
			select {
			case ch <- n:
			default:
			}
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(stop)
	return ch
}

// cutter is a dialer whose connections a test can cut (and keep cut), so
// that the server sees the client vanish, as after a crash or a partition.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("test: network cut")
	}
	conn, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

// Cut closes every connection and refuses new ones until Heal.
func (c *cutter) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func (c *cutter) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = false
}

var _ zk.Dialer = (&cutter{}).dial

// keepAlive renews id every period until the test ends, as the engine
// would: the backend ends a session that is not renewed within its
// timeout.
func keepAlive(t testing.TB, b *zksimba.Backend, id driver.ID, period time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				// A generous call timeout: on a loaded machine a renewal may
				// take longer than the period, and a missed one is retried.
				ctx, cancel := context.WithTimeout(context.Background(), 2*period)
				_, err := b.Renew(ctx, driver.RenewRequest{ID: id})
				cancel()
				if errors.Is(err, driver.ErrExpired) || errors.Is(err, driver.ErrClosed) {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func withDial(c *cutter) zksimba.Option { return zksimba.WithDialer(c.dial) }
