package core

import (
	"fmt"

	sqlbackend "github.com/simba-go/simba/backend-sql"
)

// The schema versions (docs/adr/0081-sql-schema-versions.md) are each
// dialect's own since version 4, which only MySQL/MariaDB has: each
// package's schemaVersion is the version of the tables and routines its
// code calls. Version 1 is the schema of the first releases, which
// recorded no version; version 2 adds the sessions' owner and
// <p>_open_v2, and the <p>_schema table that records the version; version
// 3 adds the <p>_epoch table whose row the acquire routine checks (the
// data-loss quarantine, ADR 0130) and routines that bound their lock waits
// (ADR 0135); version 4 on MySQL/MariaDB adds acquire and release routines
// whose lock waits the caller bounds (ADR 0144), and on PostgreSQL open,
// renew, acquire and epoch routines that commit with at least a local WAL
// flush whatever synchronous_commit says (ADR 0160); version 5 on
// PostgreSQL adds the leases' waited mark, an acquire routine that sets it
// on a refusal, and release and close routines that notify only marked
// names (ADR 0162).

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
// upgrade, e.g. "pgsimba.Migration"; want is the version this
// code needs.
func CheckSchema(label, prefix string, in Installed, migration string, want int) error {
	switch {
	case in.Version == want, in.Version > want && in.CompatibleFrom <= want:
		return nil
	case in.Version == 0:
		return fmt.Errorf("%s: namespace %q: %w: no schema installed, this code needs version %d: install %s.Schema(%q), or start once without WithoutSchemaCreation",
			label, prefix, sqlbackend.ErrSchemaVersion, want, label, prefix)
	case in.Version < want:
		return fmt.Errorf("%s: namespace %q: %w: installed schema is version %d, this code needs version %d: run %s(%q, %d), or start once without WithoutSchemaCreation",
			label, prefix, sqlbackend.ErrSchemaVersion, in.Version, want, migration, prefix, in.Version)
	default:
		return fmt.Errorf("%s: namespace %q: %w: installed schema is version %d (serving code of version %d and later), this code has version %d: upgrade this library",
			label, prefix, sqlbackend.ErrSchemaVersion, in.Version, in.CompatibleFrom, want)
	}
}
