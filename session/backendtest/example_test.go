package backendtest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// A backend's conformance test: a factory for clients of a namespace and a
// short lease. Against a real server, NewBackend connects (failing t with
// the name of the missing environment variable) and registers its cleanup;
// Advance stays nil so the kit waits real time.
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		var mu sync.Mutex // NewBackend is called from parallel subtests
		stores := map[string]*memory.Backend{}
		backendtest.Run(t, backendtest.Config{
			NewBackend: func(t *testing.T, namespace string) driver.Backend {
				mu.Lock()
				defer mu.Unlock()
				if b, ok := stores[namespace]; ok {
					return b.NewClient()
				}
				b, err := memory.New()
				if err != nil {
					t.Fatal(err)
				}
				stores[namespace] = b
				return b
			},
			Lease: 2 * time.Second,
		})
	}
}
