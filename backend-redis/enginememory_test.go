// Reported by the review of issue 23 (helper revredis) behind a build tag;
// fixed by ADR 0295: the session engine keeps the token entries of a name
// without a claim only for the last 1024 names retired.

package redissimba_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestEngineForgetsReleasedNames: a lock per entity through one long-lived
// Session (issue 23: "lock:order:<id>", each used once) must leave nothing
// behind in the process either (DESIGN: in-process per-name maps must be
// bounded): after 10,000 distinct names locked and released, the heap is
// back near where it was.
func TestEngineForgetsReleasedNames(t *testing.T) {
	c := standalone(t)
	b := newBackend(t, c, namespace(t))
	s, err := session.Open(ctxT(t), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	use := func(from, to int) {
		for i := from; i < to; i++ {
			h, err := lock.TryAcquire(ctx, s, "order:"+strconv.Itoa(i)+":with-a-name-as-long-as-an-id-0123456789")
			if err != nil {
				t.Fatalf("TryAcquire %d: %v", i, err)
			}
			if err := h.Close(); err != nil {
				t.Fatalf("Close %d: %v", i, err)
			}
		}
	}
	use(0, 1000) // warm up: pools, connections, the engine's own buffers
	time.Sleep(100 * time.Millisecond)
	before := heapInUse()
	const n = 10000
	use(1000, 1000+n)
	time.Sleep(100 * time.Millisecond)
	after := heapInUse()
	grown := int64(after) - int64(before)
	t.Logf("heap %d -> %d bytes after %d names used once: %+d (%d bytes per name)", before, after, n, grown, grown/n)
	if grown > 1<<20 {
		t.Fatalf("the process kept %d bytes (%d per name) after %d names locked and released once: per-name state outlives the lock", grown, grown/n, n)
	}
}
