package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

// BenchmarkTryAcquireClose is an uncontended lock through the public API
// on the in-memory backend (whose calls cost well under a microsecond), with
// the session's default event log: what it measures is the engine's cost
// per lock, which benchpeers compares with the real servers' raw pairs.
func BenchmarkTryAcquireClose(b *testing.B) {
	be, _ := memory.New()
	s, err := session.Open(context.Background(), be)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h, err := lock.TryAcquire(ctx, s, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryAcquireCloseDeadline is BenchmarkTryAcquireClose as a service
// calls it: a fresh context.WithTimeout per operation (issue 23), whose
// own cost (4 allocations) is included.
func BenchmarkTryAcquireCloseDeadline(b *testing.B) {
	be, _ := memory.New()
	s, err := session.Open(context.Background(), be)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := lock.TryAcquire(ctx, s, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Close(); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
