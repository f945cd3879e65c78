package sqltest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/session/driver"
)

// Schema is one dialect's hooks for the schema-version tests.
type Schema struct {
	// New returns a backend in prefix built with WithMaxLease(1s) (the
	// quarantine after an upgrade is then short); create false is
	// WithoutSchemaCreation. It is shut down when t ends.
	New func(t *testing.T, prefix string, create bool) (driver.Backend, error)
	// Install installs schema version v (1: the first releases' schema,
	// which recorded no version) as an old process would have.
	Install func(t *testing.T, prefix string, v int)
	// OpenFirst opens a session through version 1's open routine, as a
	// process still running the old code does.
	OpenFirst func(t *testing.T, prefix string, id driver.ID)
	// AcquireFirst acquires a name through version 1's acquire routine
	// and returns its token.
	AcquireFirst func(t *testing.T, prefix string, id driver.ID, name string) uint64
	// SetVersion overwrites the recorded version, as a newer release
	// would have written it.
	SetVersion func(t *testing.T, prefix string, version, compatibleFrom int)
	// Drop removes the namespace's tables and routines.
	Drop func(t testing.TB, prefix string)
	// Label is the package name, which error messages start with.
	Label string
	// Version is the schema version the dialect's code needs.
	Version int
}

// RunSchema runs the schema-version tests against s.
func RunSchema(t *testing.T, s Schema) {
	t.Run("UpgradeFromFirstSchema", func(t *testing.T) { upgradeFrom(t, s, 1) })
	t.Run("UpgradeFromPreviousSchema", func(t *testing.T) { upgradeFrom(t, s, s.Version-1) })
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

// A namespace installed by an older release (from): a backend that must
// not create the schema refuses it, naming both versions and the
// migration; a backend that may create it migrates it, keeping the old
// process's session and lease; the first acquisition afterwards is
// quarantined once, for one maximum lease (the upgraded tables may have
// just been restored from an old backup, ADR 0130), leases held meanwhile
// staying held; and old and new code then run side by side.
func upgradeFrom(t *testing.T, s Schema, from int) {
	prefix := FreshPrefix()
	t.Cleanup(func() { s.Drop(t, prefix) })
	s.Install(t, prefix, from)
	oldID := driver.ID(strings.Repeat("ab", 16))
	s.OpenFirst(t, prefix, oldID)
	oldTok := s.AcquireFirst(t, prefix, oldID, "held")

	strict, err := s.New(t, prefix, false)
	if err != nil {
		t.Fatalf("New(WithoutSchemaCreation) must not touch the database: %v", err)
	}
	_, err = strict.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute})
	wantVersionError(t, fmt.Sprintf("Open on schema version %d", from), err, fmt.Sprintf("version %d", from),
		fmt.Sprintf("version %d", s.Version), fmt.Sprintf("%s.Migration(%q, %d)", s.Label, prefix, from))

	b, err := s.New(t, prefix, true)
	if err != nil {
		t.Fatalf("New migrating from schema version %d: %v", from, err)
	}
	start := time.Now()
	rep, err := b.Acquire(Ctx(t), driver.AcquireRequest{ID: oldID, Names: []string{"x"}})
	if err != nil || rep.Quarantine <= 0 || rep.Quarantine > time.Second || rep.Results[0].Token != 0 {
		t.Fatalf("first Acquire after the migration = %+v, %v; want a quarantine of at most MaxLease (1s) and no grant", rep, err)
	}
	var tok uint64
	for tok == 0 { // the old process's session lives on, and acquires after the quarantine
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no grant %v after a quarantine of %v", time.Since(start), rep.Quarantine)
		}
		<-time.After(50 * time.Millisecond) // the database's clock must pass the quarantine
		tok = Acquire(t, b, oldID, "x")
	}
	if since := time.Since(start); since < rep.Quarantine-100*time.Millisecond {
		t.Fatalf("granted %v after a quarantine of %v began", since, rep.Quarantine)
	}
	hs, err := b.(driver.Inspector).Inspect(Ctx(t), driver.InspectRequest{Names: []string{"held"}})
	if err != nil || len(hs) != 1 || hs[0].Token != oldTok || hs[0].Session != oldID {
		t.Fatalf("the lease held through the migration and the quarantine: %+v, %v; want held by %s under %d", hs, err, oldID, oldTok)
	}
	owner := driver.Owner{Identity: "new/1", Metadata: map[string]string{"addr": "h:1"}}
	r, err := b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute, Owner: owner})
	if err != nil {
		t.Fatalf("Open after the migration: %v", err)
	}
	Acquire(t, b, r.ID, "y")
	s.OpenFirst(t, prefix, driver.ID(strings.Repeat("cd", 16))) // old code still opens
	hs, err = b.(driver.Inspector).Inspect(Ctx(t), driver.InspectRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 || hs[1].Session != oldID || hs[1].Owner.Identity != "" || hs[2].Owner.Identity != "new/1" || hs[2].Owner.Metadata["addr"] != "h:1" {
		t.Errorf("Inspect after the migration = %+v, want held and x held by the old session (no owner) and y by new/1", hs)
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
	v, next := s.Version, s.Version+1
	s.SetVersion(t, prefix, next, v)
	for _, create := range []bool{true, false} {
		b, err := s.New(t, prefix, create)
		if err == nil {
			_, err = b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Minute})
		}
		if err != nil {
			t.Errorf("schema %d compatible from %d (create %v): %v", next, v, create, err)
		}
	}
	s.SetVersion(t, prefix, next, next)
	_, err := s.New(t, prefix, true)
	wantVersionError(t, "New on an incompatible newer schema", err, fmt.Sprintf("version %d", next), fmt.Sprintf("version %d", v), "upgrade")
	b, err := s.New(t, prefix, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(Ctx(t), driver.AcquireRequest{ID: driver.ID(strings.Repeat("ef", 16)), Names: []string{"x"}})
	wantVersionError(t, "Acquire WithoutSchemaCreation on an incompatible newer schema", err, fmt.Sprintf("version %d", next), fmt.Sprintf("version %d", v))
}
