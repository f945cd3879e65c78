package mysqlsimba

import (
	"fmt"
	"strings"
)

// FirstSchema is version 1 of the schema, as the first releases installed
// it: the starting point of the upgrade test.
func FirstSchema(prefix string) ([]string, error) { return expandAll(schema, prefix) }

// SchemaAt is schema version v as the release that had it installed it
// (no epoch row: only creation by this code writes one).
func SchemaAt(prefix string, v int) ([]string, error) {
	src := append([]string(nil), schema...)
	for i := 1; i < v; i++ {
		src = append(src, migrations[i]...)
	}
	return expandAll(src, prefix)
}

// AcquireWithoutQuarantine is acquire_v2 with its checks of the
// quarantine and of the epoch row and markers taken out, preceded by the
// DROP that makes room for it: the planted bug that the data-loss tests
// must catch.
func AcquireWithoutQuarantine(prefix string) ([]string, error) {
	const check = " AND v_ok = 1 AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6))"
	for _, s := range migrations[2] {
		if !strings.Contains(s, "CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v2(") {
			continue
		}
		if strings.Count(s, check) != 1 {
			return nil, fmt.Errorf("acquire_v2's quarantine check not found")
		}
		s = strings.ReplaceAll(s, check, "")
		s = strings.ReplaceAll(s, " AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6))", "")
		return expandAll([]string{"DROP PROCEDURE {p}_acquire_v2", s}, prefix)
	}
	return nil, fmt.Errorf("acquire_v2 not found")
}
