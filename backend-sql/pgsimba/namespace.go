package pgsimba

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
)

// DefaultSchema is the schema a new namespace is created in when
// [WithSchema] is not given and the namespace exists nowhere in the
// database yet. It does not depend on any pool's search_path (ADR 0170).
const DefaultSchema = "public"

// column is a column of a table Simba creates, with its type as
// format_type prints it; since is the schema version that added it
// (columns added later may be missing from an older namespace).
type column struct {
	name, typ string
	since     int
}

// ourTables are the tables of a namespace by name suffix, with every
// column each may have: a table of these names with another column, a
// column of another type, or one of the first columns missing is not
// Simba's (ADR 0172).
var ourTables = map[string][]column{
	"_sessions": {{"id", "text", 1}, {"expires_at", "timestamp with time zone", 1}, {"lease", "interval", 1}, {"version", "bigint", 1}, {"owner", "text", 2}},
	"_leases":   {{"name", "text", 1}, {"session_id", "text", 1}, {"token", "bigint", 1}, {"held", "boolean", 1}, {"waited", "boolean", 5}, {"delay_us", "bigint", 7}, {"ended_at", "timestamp with time zone", 7}},
	"_marks":    {{"bucket", "integer", 7}, {"token", "bigint", 7}},
	"_schema":   {{"id", "integer", 1}, {"version", "integer", 1}, {"compatible_from", "integer", 1}},
	"_epoch":    {{"id", "integer", 1}, {"quarantine_until", "timestamp with time zone", 1}},
}

// ourRoutines are the routines of a namespace by name suffix, every
// version's.
var ourRoutines = []string{
	"_open_v1", "_open_v2", "_open_v3", "_open_v4", "_open_v5",
	"_renew_v1", "_renew_v2", "_renew_v3",
	"_acquire_v1", "_acquire_v2", "_acquire_v3", "_acquire_v4", "_acquire_v5",
	"_epoch_v1", "_epoch_v2", "_epoch_v3",
	"_release_v1", "_release_v2", "_release_v3", "_release_v4",
	"_close_v1", "_close_v2", "_close_v3", "_close_v4",
	"_refuse_v1",
}

func names(prefix string, suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = prefix + s
	}
	return out
}

func tableNames(prefix string) []string {
	suffixes := make([]string, 0, len(ourTables))
	for s := range ourTables {
		suffixes = append(suffixes, s)
	}
	slices.Sort(suffixes)
	return names(prefix, suffixes)
}

// checkSchemaName refuses a schema name that the generated SQL could not
// carry: it is quoted as an identifier and as a literal, inside
// dollar-quoted bodies (a backslash would escape a literal's closing quote
// for a role with standard_conforming_strings off).
func checkSchemaName(s string) error {
	if s == "" || len(s) > 63 || strings.ContainsAny(s, "\x00\"'$\\") {
		return fmt.Errorf("pgsimba: schema %q: want 1 to 63 bytes without NUL, quotes, $ or backslash", s)
	}
	return nil
}

// place is where a namespace is: its schema, what is installed there,
// and whether any of its tables exist.
type place struct {
	schema string
	in     core.Installed
	// others are the other schemas holding tables of the prefix, when
	// WithSchema chose among them.
	others []string
}

type rowQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// survey finds the namespace in the database, by the catalog and never by
// a search_path (ADR 0170): the one schema that holds tables of its names,
// or, if none does, the schema WithSchema names (DefaultSchema without
// it). It refuses tables of its names in more than one schema, or in
// another schema than WithSchema names, and tables or routines of its
// names that Simba did not create (ADR 0172); it reads the installed
// version. It only reads.
func (b *Backend) survey(ctx context.Context, q rowQuerier) (place, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT n.nspname FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = ANY($1) AND n.nspname !~ '^pg_(toast_)?temp_' ORDER BY 1`, tableNames(b.prefix))
	if err != nil {
		return place{}, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return place{}, err
	}
	p := place{schema: b.schema}
	switch {
	case len(found) > 1 && slices.Contains(found, b.schema):
		// WithSchema says which: the others are namespaces of their own
		// (tenants each in their own schema, as releases before schema
		// version 6 made them by each role's search_path), never touched.
		p.others = slices.DeleteFunc(slices.Clone(found), func(s string) bool { return s == b.schema })
		found = []string{b.schema}
	case len(found) > 1:
		return place{}, fmt.Errorf("pgsimba: namespace %q has tables in schemas %s: %w (ADR 0170): each is a namespace of its own, which processes whose search_path differ took for one; drop the one not in use, use another namespace, or, if each is meant (one per tenant), name this process's schema with WithSchema",
			b.prefix, strings.Join(found, " and "), sqlbackend.ErrSchemaConflict)
	case len(found) == 1 && b.schema != "" && found[0] != b.schema:
		return place{}, fmt.Errorf("pgsimba: namespace %q has its tables in schema %q, not in %q (WithSchema): %w (ADR 0170); pass WithSchema(%q), or use another namespace",
			b.prefix, found[0], b.schema, sqlbackend.ErrSchemaConflict, found[0])
	case len(found) == 1:
		p.schema = found[0]
	case p.schema == "":
		p.schema = DefaultSchema
	}
	if err := checkSchemaName(p.schema); err != nil {
		return place{}, err
	}
	if len(found) == 0 {
		// Nothing of it is here: no routine of its names may be either
		// (CREATE OR REPLACE would replace an application's own).
		var fn string
		err := q.QueryRow(ctx, `SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = ANY($2) ORDER BY 1 LIMIT 1`, p.schema, names(b.prefix, ourRoutines)).Scan(&fn)
		switch {
		case err == nil:
			return place{}, fmt.Errorf("pgsimba: namespace %q: routine %s exists in schema %q without the namespace's tables: %w: Simba never replaces a routine it did not create; drop it if it is left from a dropped namespace, or use another namespace",
				b.prefix, fn, p.schema, sqlbackend.ErrForeignTable)
		case !errors.Is(err, pgx.ErrNoRows):
			return place{}, err
		}
		return p, nil
	}
	tables, err := b.shapes(ctx, q, p.schema)
	if err != nil {
		return place{}, err
	}
	switch {
	case tables[b.prefix+"_schema"]:
		err = q.QueryRow(ctx, fmt.Sprintf("SELECT version, compatible_from FROM %s.%s_schema WHERE id = 1", quoteIdent(p.schema), b.prefix)).Scan(&p.in.Version, &p.in.CompatibleFrom)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: table %s_schema is empty", core.ErrBadReply, b.prefix)
		}
		return p, err
	default: // only the first schema's tables: version 1
		return place{schema: p.schema, in: core.Installed{Version: 1, CompatibleFrom: 1}, others: p.others}, nil
	}
}

// shapes checks that every table of the namespace's names in schema is
// one Simba created (a plain table with Simba's columns and types) and
// that the sessions table, which every version has, is there; it answers
// the tables found.
func (b *Backend) shapes(ctx context.Context, q rowQuerier, schema string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT c.relname, c.relkind::text, coalesce(a.attname::text, ''), coalesce(pg_catalog.format_type(a.atttypid, a.atttypmod), '')
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY 1, a.attnum`, schema, tableNames(b.prefix))
	if err != nil {
		return nil, err
	}
	type col struct{ table, kind, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.table, &c.kind, &c.name, &c.typ)
		return c, err
	})
	if err != nil {
		return nil, err
	}
	foreign := func(table, why string) error {
		return fmt.Errorf("pgsimba: namespace %q: table %s.%s is not one Simba created (%s): %w: Simba never alters or writes a table it did not create (ADR 0172); use another namespace, or rename the table",
			b.prefix, schema, table, why, sqlbackend.ErrForeignTable)
	}
	seen := map[string]map[string]bool{}
	for _, c := range cols {
		want := ourTables[strings.TrimPrefix(c.table, b.prefix)]
		if c.kind != "r" {
			return nil, foreign(c.table, "a relation of kind "+c.kind+", not a table")
		}
		if seen[c.table] == nil {
			seen[c.table] = map[string]bool{}
		}
		if c.name == "" {
			continue // a table without columns
		}
		i := slices.IndexFunc(want, func(w column) bool { return w.name == c.name })
		switch {
		case i < 0:
			return nil, foreign(c.table, "column "+c.name+" is not one of Simba's")
		case want[i].typ != c.typ:
			return nil, foreign(c.table, fmt.Sprintf("column %s is %s, Simba's is %s", c.name, c.typ, want[i].typ))
		}
		seen[c.table][c.name] = true
	}
	tables := map[string]bool{}
	for table, got := range seen {
		for _, w := range ourTables[strings.TrimPrefix(table, b.prefix)] {
			if w.since == 1 && !got[w.name] {
				return nil, foreign(table, "no column "+w.name)
			}
		}
		tables[table] = true
	}
	if !tables[b.prefix+"_sessions"] {
		for _, t := range tableNames(b.prefix) {
			if tables[t] {
				return nil, foreign(t, "the namespace has no "+b.prefix+"_sessions, which every version of Simba creates with it")
			}
		}
	}
	return tables, nil
}

// quoteIdent quotes a schema name that passed checkSchemaName.
func quoteIdent(s string) string { return `"` + s + `"` }
