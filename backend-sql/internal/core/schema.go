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
// names (ADR 0162); version 6 on PostgreSQL binds every routine to
// the namespace's schema (SET search_path, ADR 0170); version 7 on
// PostgreSQL and version 5 on MySQL/MariaDB keep no row per name (a lease
// row lives while held; tokens rise through 1024 marks) and record the
// lock-delay, and refuse the older routines' grants: compatible_from is 7
// and 5 (ADR 0250, 0251, 0252).

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

// CheckReadable is [CheckSchema] for a backend that only reads
// (OpenExisting): a looking tool reads the tables, which every version
// from 2 on has as Inspect reads them (owners came with version 2), so it
// also reads a namespace that processes of an older release still run on,
// during a rolling upgrade, and never asks to migrate what it only looks
// at. A newer version than this code knows is read while it still serves
// this code's version.
func CheckReadable(label, prefix string, in Installed, want int) error {
	switch {
	case in.Version >= 2 && in.Version <= want, in.Version > want && in.CompatibleFrom <= want:
		return nil
	case in.Version == 1:
		return fmt.Errorf("%s: namespace %q: %w: installed schema is version 1, which records no owners; this tool reads version 2 and later: upgrade the namespace (start an application of this release on it once)",
			label, prefix, sqlbackend.ErrSchemaVersion)
	}
	return CheckSchema(label, prefix, in, "", want)
}
