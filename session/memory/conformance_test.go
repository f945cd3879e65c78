package memory_test

import (
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// namespaces hands out one memory store per kit namespace, all on one
// virtual clock, so the kit runs in virtual time.
type namespaces struct {
	clock    *memory.ManualClock
	maxLease time.Duration // the cap every store is built with
	maxDelay time.Duration // the lock-delay cap every store is built with
	opts     []memory.Option
	mu       sync.Mutex
	ns       map[string]*memory.Backend
}

func newNamespaces(maxLease time.Duration, opts ...memory.Option) *namespaces {
	c := memory.NewManualClock(time.Unix(1_000_000, 0))
	// The lock-delay cap is the lease cap, as on the real servers' tests.
	return &namespaces{clock: c, maxLease: maxLease, maxDelay: maxLease,
		opts: append([]memory.Option{memory.WithClock(c), memory.WithMaxLease(maxLease), memory.WithMaxLockDelay(maxLease)}, opts...), ns: map[string]*memory.Backend{}}
}

func (n *namespaces) newBackend(t *testing.T, namespace string) driver.Backend {
	n.mu.Lock()
	defer n.mu.Unlock()
	if b, ok := n.ns[namespace]; ok {
		return b.NewClient()
	}
	b, err := memory.New(n.opts...)
	if err != nil {
		t.Fatalf("memory.New: %v", err)
	}
	n.ns[namespace] = b
	return b
}

// init is Config.Init for stores made WithUninitialisedNamespace.
func (n *namespaces) init(t *testing.T, namespace string) {
	if err := n.newBackend(t, namespace).(*memory.Backend).Init(t.Context()); err != nil {
		t.Fatalf("Init(%q): %v", namespace, err)
	}
}

func (n *namespaces) loseData(*testing.T) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range n.ns {
		b.LoseData(false)
	}
}

func (n *namespaces) config() backendtest.Config {
	return backendtest.Config{
		NewBackend:   n.newBackend,
		Lease:        2 * time.Second,
		MaxLease:     n.maxLease,
		MaxLockDelay: n.maxDelay,
		LoseData:     n.loseData,
		Advance:      func(_ *testing.T, d time.Duration) { n.clock.Advance(d) },
	}
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, newNamespaces(2*time.Second).config())
}

// Namespaces that start as Redis and ZooKeeper ones do: quarantined at
// their first use unless initialised.
func TestConformanceUninitialised(t *testing.T) {
	n := newNamespaces(2*time.Second, memory.WithUninitialisedNamespace())
	cfg := n.config()
	cfg.Init = n.init
	backendtest.Run(t, cfg)
}

// ZooKeeper-like grants: a capped lease, 5/12 of it reported.
func TestConformanceZooKeeperLike(t *testing.T) {
	backendtest.Run(t, newNamespaces(1500*time.Millisecond, memory.WithGrantFraction(5, 12)).config())
}

// The kit in real time, as on a real server (expiry subtests in parallel).
func TestConformanceRealTime(t *testing.T) {
	n := newNamespaces(300 * time.Millisecond)
	n.opts = []memory.Option{memory.WithMaxLease(n.maxLease), memory.WithMaxLockDelay(n.maxDelay)} // system clock
	cfg := n.config()
	cfg.Advance = nil
	cfg.Lease = 300 * time.Millisecond
	backendtest.Run(t, cfg)
}
