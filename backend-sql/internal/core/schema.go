package core

import (
	"fmt"

	sqlbackend "github.com/simba-go/simba/backend-sql"
)

// SchemaVersion is the version of the tables and routines this code calls
// (docs/adr/0081-sql-schema-versions.md). Version 1 is the schema of the
// first releases, which recorded no version; version 2 adds the sessions'
// owner and <p>_open_v2, and the <p>_schema table that records the version;
// version 3 adds the <p>_epoch table whose row the acquire routine checks
// (the data-loss quarantine, ADR 0130) and routines that bound their lock
// waits (ADR 0135).
const SchemaVersion = 3

// Installed is what a namespace's schema table records: its version, and
// the oldest code version whose routines it still serves (a migration
// keeps the older routines, so processes not yet upgraded keep running).
// Version 0 means nothing is installed.
type Installed struct {
	Version, CompatibleFrom int
}

// CheckSchema reports whether this code can run on the installed schema,
// or an error wrapping [sqlbackend.ErrSchemaVersion] that names both
// versions and what to do. migration names the function that returns the
// upgrade, e.g. "pgsimba.Migration".
func CheckSchema(label, prefix string, in Installed, migration string) error {
	switch {
	case in.Version == SchemaVersion, in.Version > SchemaVersion && in.CompatibleFrom <= SchemaVersion:
		return nil
	case in.Version == 0:
		return fmt.Errorf("%s: namespace %q: %w: no schema installed, this code needs version %d: install %s.Schema(%q), or start once without WithoutSchemaCreation",
			label, prefix, sqlbackend.ErrSchemaVersion, SchemaVersion, label, prefix)
	case in.Version < SchemaVersion:
		return fmt.Errorf("%s: namespace %q: %w: installed schema is version %d, this code needs version %d: run %s(%q, %d), or start once without WithoutSchemaCreation",
			label, prefix, sqlbackend.ErrSchemaVersion, in.Version, SchemaVersion, migration, prefix, in.Version)
	default:
		return fmt.Errorf("%s: namespace %q: %w: installed schema is version %d (serving code of version %d and later), this code has version %d: upgrade this library",
			label, prefix, sqlbackend.ErrSchemaVersion, in.Version, in.CompatibleFrom, SchemaVersion)
	}
}
