package sqltest

import (
	"errors"
	"strings"
	"testing"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/session/driver"
)

// Schema is one dialect's hooks for the schema-version tests.
type Schema struct {
	// New returns a backend in prefix; create false is
	// WithoutSchemaCreation. It is shut down when t ends.
	New func(t *testing.T, prefix string, create bool) (driver.Backend, error)
	// InstallFirst installs version 1, the schema of the first releases
	// (no version recorded), as an old process would have.
	InstallFirst func(t *testing.T, prefix string)
	// OpenFirst opens a session through version 1's open routine, as a
	// process still running the old code does.
	OpenFirst func(t *testing.T, prefix string, id driver.ID)
	// SetVersion overwrites the recorded version, as a newer release
	// would have written it.
	SetVersion func(t *testing.T, prefix string, version, compatibleFrom int)
	// Drop removes the namespace's tables and routines.
	Drop func(t testing.TB, prefix string)
	// Label is the package name, which error messages start with.
	Label string
}

// RunSchema runs the schema-version tests against s.
func RunSchema(t *testing.T, s Schema) {
	t.Run("UpgradeFromFirstSchema", func(t *testing.T) { upgradeFromFirst(t, s) })
	t.Run("NewerSchema", func(t *testing.T) { newerSchema(t, s) })
}

// wantVersionError checks that err wraps ErrSchemaVersion and names every
// part of want.
func wantVersionError(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, sqlbackend.ErrSchemaVersion) {
		t.Fatalf("%s: err = %v, want one wrapping ErrSchemaVersion", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not name %q", what, err, w)
		}
	}
}

// A namespace installed by the first releases: a backend that must not
// create the schema refuses it, naming both versions and the migration; a
// backend that may create it migrates it, keeping the old process's session
// and lease, and old and new code then run side by side.
func upgradeFromFirst(t *testing.T, s Schema) {
	prefix := FreshPrefix()
	t.Cleanup(func() { s.Drop(t, prefix) })
	s.InstallFirst(t, prefix)
	oldID := driver.ID(strings.Repeat("ab", 16))
	s.OpenFirst(t, prefix, oldID)

	strict, err := s.New(t, prefix, false)
	if err != nil {
		t.Fatalf("New(WithoutSchemaCreation) must not touch the database: %v", err)
	}
	_, err = strict.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute})
	wantVersionError(t, "Open on the first schema", err, "version 1", "version 2", s.Label+".Migration(\""+prefix+"\", 1)")

	b, err := s.New(t, prefix, true)
	if err != nil {
		t.Fatalf("New migrating from the first schema: %v", err)
	}
	tok := Acquire(t, b, oldID, "x") // the old process's session lives on
	if tok == 0 {
		t.Fatal("the old session could not acquire a free name after the migration")
	}
	owner := driver.Owner{Identity: "new/1", Metadata: map[string]string{"addr": "h:1"}}
	r, err := b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute, Owner: owner})
	if err != nil {
		t.Fatalf("Open after the migration: %v", err)
	}
	Acquire(t, b, r.ID, "y")
	s.OpenFirst(t, prefix, driver.ID(strings.Repeat("cd", 16))) // old code still opens
	hs, err := b.(driver.Inspector).Inspect(Ctx(t), driver.InspectRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Session != oldID || hs[0].Owner.Identity != "" || hs[1].Owner.Identity != "new/1" || hs[1].Owner.Metadata["addr"] != "h:1" {
		t.Errorf("Inspect after the migration = %+v, want x held by the old session (no owner) and y by new/1", hs)
	}
	// Now the strict backend starts too (it checks again at the next call).
	if _, err := strict.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute}); err != nil {
		t.Errorf("Open WithoutSchemaCreation after the migration: %v", err)
	}
	// Migrating again is a no-op.
	if _, err := s.New(t, prefix, true); err != nil {
		t.Errorf("New on a migrated namespace: %v", err)
	}
}

// A newer release's schema is used when it says it still serves this code,
// and refused, naming both versions, when it does not.
func newerSchema(t *testing.T, s Schema) {
	prefix := FreshPrefix()
	t.Cleanup(func() { s.Drop(t, prefix) })
	if _, err := s.New(t, prefix, true); err != nil {
		t.Fatal(err)
	}
	s.SetVersion(t, prefix, 3, 2)
	for _, create := range []bool{true, false} {
		b, err := s.New(t, prefix, create)
		if err == nil {
			_, err = b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute})
		}
		if err != nil {
			t.Errorf("schema 3 compatible from 2 (create %v): %v", create, err)
		}
	}
	s.SetVersion(t, prefix, 3, 3)
	_, err := s.New(t, prefix, true)
	wantVersionError(t, "New on an incompatible newer schema", err, "version 3", "version 2", "upgrade")
	b, err := s.New(t, prefix, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(Ctx(t), driver.AcquireRequest{ID: driver.ID(strings.Repeat("ef", 16)), Names: []string{"x"}})
	wantVersionError(t, "Acquire WithoutSchemaCreation on an incompatible newer schema", err, "version 3", "version 2")
}
