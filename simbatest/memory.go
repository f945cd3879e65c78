package simbatest

import (
	"testing"

	"github.com/simba-go/simba/session/memory"
)

// Memory returns the in-memory backend, for unit tests that need no server:
// its NewClient gives each simulated process its own client of the same
// store. Options are memory's (a manual clock, for instance).
func Memory(t testing.TB, opts ...memory.Option) *memory.Backend {
	t.Helper()
	b, err := memory.New(opts...)
	if err != nil {
		t.Fatalf("simbatest: memory backend: %v", err)
	}
	return b
}
