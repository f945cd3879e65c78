package pgsimba

import (
	"fmt"
	"strings"

	"github.com/simba-go/simba/backend-sql/internal/core"
)

// FirstSchema is version 1 of the schema, as the first releases installed
// it: the starting point of the upgrade test.
func FirstSchema(prefix string) (string, error) { return core.Expand(schema, prefix) }

// SchemaAt is schema version v as the release that had it installed it
// (no epoch row: only creation by this code writes one).
func SchemaAt(prefix string, v int) (string, error) {
	sql := schema
	for i := 1; i < v; i++ {
		sql += migrations[i]
	}
	return core.Expand(strings.ReplaceAll(sql, "{s}", DefaultSchema), prefix)
}

// AcquireWithoutQuarantine is acquire_v5, the routine this code calls,
// with its check of the epoch row and markers taken out: the planted bug
// that the data-loss tests must catch.
func AcquireWithoutQuarantine(prefix string) (string, error) {
	m := migrations[6]
	start := strings.Index(m, "CREATE OR REPLACE FUNCTION {p}_acquire_v5")
	if start < 0 {
		return "", fmt.Errorf("acquire_v5 not found")
	}
	end := strings.Index(m[start:], "END $$;")
	body := m[start : start+end+len("END $$;")]
	const check = "\n           AND EXISTS (SELECT 1 FROM {p}_epoch ke JOIN {p}_sessions ks ON ks.id = '~epoch' JOIN {p}_leases kl ON kl.name = '~epoch' WHERE ke.id = 1 AND ke.quarantine_until <= clock_timestamp())"
	if strings.Count(body, check) != 2 {
		return "", fmt.Errorf("acquire_v5's epoch check not found twice")
	}
	return core.Expand(strings.ReplaceAll(strings.ReplaceAll(body, check, ""), "{s}", DefaultSchema), prefix)
}

// SchemaVersion is the schema version this code needs.
const SchemaVersion = schemaVersion

// SetsReadCommitted reports whether a call found the pool's transactions
// other than READ COMMITTED, so that calls now set it (ADR 0171).
func (b *Backend) SetsReadCommitted() bool { return b.notRC.Load() }
