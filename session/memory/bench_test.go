package memory_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/simba-go/simba/session/driver"
)

// The memory backend's "raw operation" is a map update under a mutex;
// BenchmarkRawMapUnderMutex measures that, so the other figures read as a
// ratio to it: what the SPI shape (sweep, version, reply) costs on top.

func BenchmarkRawMapUnderMutex(b *testing.B) {
	var mu sync.Mutex
	m := map[string]uint64{}
	for i := 0; b.Loop(); i++ {
		mu.Lock()
		m["leader"] = uint64(i)
		mu.Unlock()
	}
}

func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			f := newFixture(b)
			id := f.open()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("lease-%04d", i)
			}
			if _, err := f.b.Acquire(b.Context(), driver.AcquireRequest{ID: id, Names: names}); err != nil {
				b.Fatal(err)
			}
			r, _ := f.b.Renew(b.Context(), driver.RenewRequest{ID: id})
			for b.Loop() {
				if _, err := f.b.Renew(b.Context(), driver.RenewRequest{ID: id, KnownVersion: r.Version}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			f := newFixture(b)
			id := f.open()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("lease-%04d", i)
			}
			leases := make([]driver.Lease, n)
			for b.Loop() {
				r, err := f.b.Acquire(b.Context(), driver.AcquireRequest{ID: id, Names: names})
				if err != nil {
					b.Fatal(err)
				}
				for i, res := range r.Results {
					leases[i] = driver.Lease{Name: res.Name, Token: res.Token}
				}
				if err := f.b.Release(b.Context(), driver.ReleaseRequest{ID: id, Leases: leases}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
