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

// AcquireWithoutQuarantine is acquire_v4 (the routine this code calls on
// MariaDB, and through acquire_v5 on MySQL) with its checks of the
// quarantine and of the epoch row and markers taken out, preceded by the
// DROP that makes room for it: the planted bug that the data-loss tests
// must catch.
func AcquireWithoutQuarantine(prefix string) ([]string, error) {
	for _, s := range migrations[4] {
		if !strings.Contains(s, "CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v4(") {
			continue
		}
		n := strings.Count(s, "quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6)")
		s = strings.ReplaceAll(s, " AND v_ok = 1", "")
		s = strings.ReplaceAll(s, " AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6))", "")
		if n != 2 || strings.Contains(s, "quarantine_until IS NULL") {
			return nil, fmt.Errorf("acquire_v4's quarantine checks not found")
		}
		return expandAll([]string{"DROP PROCEDURE {p}_acquire_v4", s}, prefix)
	}
	return nil, fmt.Errorf("acquire_v4 not found")
}

// SchemaVersion is the schema version this code needs.
const SchemaVersion = schemaVersion

// Namespace is b's namespace.
func (b *Backend) Namespace() string { return b.prefix }

// HintSQL is the SQL expression of name's wake-up hint (ADR 0145) for the
// argument HintArg(prefix, name), on a connection to the namespace's
// database.
const HintSQL = hintSQL

// HintArg is the argument of HintSQL for name in namespace prefix.
func HintArg(prefix, name string) string { return prefix + ":" + name }

// CallVersion3Routines makes b call acquire_v2 and release_v2, as on
// MySQL, after its first call has run.
func CallVersion3Routines(b *Backend) { b.mariadb = false }

// SurveyStatements are the survey's information_schema queries of the
// namespace's tables, with their arguments.
func SurveyStatements(prefix string) ([]string, []any) {
	suffixes := make([]string, 0, len(ourTables))
	for s := range ourTables {
		suffixes = append(suffixes, s)
	}
	list, args := inList(prefix, suffixes)
	return []string{fmt.Sprintf(surveyTablesSQL, list), fmt.Sprintf(surveyColumnsSQL, list)}, args
}
