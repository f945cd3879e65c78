package memory_test

import (
	"errors"
	"testing"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// FuzzAcquireRelease checks that whatever the name, the backend stores it
// exactly when deadline.ValidateName accepts it, and that a release with
// the right token frees it again.
func FuzzAcquireRelease(f *testing.F) {
	for _, s := range []string{"leader", "", ".", "..", "...", "a/b", "a\x00", "ä", "A.b_c:d-9", "{ns}", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		fx := newFixture(t)
		id := fx.open()
		r, err := fx.b.Acquire(t.Context(), driver.AcquireRequest{ID: id, Names: []string{name}})
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		res := r.Results[0]
		if deadline.ValidateName(name) != nil {
			if !errors.Is(res.Err, deadline.ErrInvalidName) || res.Token != 0 {
				t.Fatalf("Acquire(%q) = %d, %v; want 0, ErrInvalidName", name, res.Token, res.Err)
			}
			if err := fx.b.Release(t.Context(), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: 1}}}); !errors.Is(err, deadline.ErrInvalidName) {
				t.Fatalf("Release(%q): %v, want ErrInvalidName", name, err)
			}
			fx.wantOwner(name, "", 0)
			return
		}
		if res.Err != nil || res.Token != 1 {
			t.Fatalf("Acquire(%q) = %d, %v; want 1, nil", name, res.Token, res.Err)
		}
		fx.wantOwner(name, id, 1)
		if err := fx.b.Release(t.Context(), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: name, Token: 1}}}); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		fx.wantOwner(name, "", 0)
	})
}
