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
	return core.Expand(sql, prefix)
}

// AcquireWithoutQuarantine is acquire_v2 with its check of the epoch row
// and markers taken out: the planted bug that the data-loss tests must
// catch.
func AcquireWithoutQuarantine(prefix string) (string, error) {
	m := migrations[2]
	start := strings.Index(m, "CREATE OR REPLACE FUNCTION {p}_acquire_v2")
	if start < 0 {
		return "", fmt.Errorf("acquire_v2 not found")
	}
	end := strings.Index(m[start:], "END $$;")
	body := m[start : start+end+len("END $$;")]
	const check = "\n           AND EXISTS (SELECT 1 FROM {p}_epoch e JOIN {p}_sessions ms ON ms.id = '~epoch' JOIN {p}_leases ml ON ml.name = '~epoch' WHERE e.id = 1 AND e.quarantine_until <= clock_timestamp())"
	if strings.Count(body, check) != 2 {
		return "", fmt.Errorf("acquire_v2's epoch check not found twice")
	}
	return core.Expand(strings.ReplaceAll(body, check, ""), prefix)
}

// SchemaVersion is the schema version this code needs.
const SchemaVersion = schemaVersion
