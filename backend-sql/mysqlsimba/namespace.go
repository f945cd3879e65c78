package mysqlsimba

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
)

// column is a column of a table Simba creates, with its DATA_TYPE;
// required says every version has it (later ones add the others).
type column struct {
	name, typ string
	required  bool
}

// ourTables are the tables of a namespace by name suffix, with every
// column each may have: a table of these names with another column, a
// column of another type, or a required column missing is not Simba's
// (ADR 0172).
var ourTables = map[string][]column{
	"_sessions": {{"id", "char", true}, {"expires_at", "datetime", true}, {"lease_us", "bigint", true}, {"version", "bigint", true}, {"owner", "text", false}, {"quarantine_until", "datetime", false}},
	"_leases":   {{"name", "varchar", true}, {"session_id", "char", true}, {"token", "bigint", true}, {"held", "tinyint", true}, {"legacy", "tinyint", false}, {"delay_us", "bigint", false}, {"ended_at", "datetime", false}, {"grant_token", "bigint", false}},
	"_marks":    {{"bucket", "int", true}, {"token", "bigint", true}},
	"_schema":   {{"id", "int", true}, {"version", "int", true}, {"compatible_from", "int", true}},
	"_epoch":    {{"id", "int", true}, {"quarantine_until", "datetime", true}},
}

// ourRoutines are the procedures of a namespace by name suffix, every
// version's.
var ourRoutines = []string{
	"_open_v1", "_open_v2", "_open_v3", "_renew_v1", "_renew_v2",
	"_acquire_v1", "_acquire_v2", "_acquire_v3", "_lost_v1",
	"_release_v1", "_release_v2", "_release_v3", "_close_v1", "_close_v2",
	"_open_v4", "_acquire_v4", "_acquire_v5", "_release_v4", "_release_v5", "_close_v3",
}

// inList is "?, ?, ..." for n arguments, and the arguments: prefix and
// each suffix.
func inList(prefix string, suffixes []string) (string, []any) {
	args := make([]any, len(suffixes))
	for i, s := range suffixes {
		args[i] = prefix + s
	}
	return "?" + strings.Repeat(", ?", len(suffixes)-1), args
}

type rowsQuerier interface {
	querier
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// surveyTablesSQL and surveyColumnsSQL read the namespace's tables and
// their columns; %s is inList's placeholders for the table names.
const (
	surveyTablesSQL = `SELECT table_name, table_type FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name IN (%s) ORDER BY 1`
	surveyColumnsSQL = `SELECT table_name, column_name, data_type FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name IN (%s) ORDER BY 1, ordinal_position`
)

// survey checks that every table of the namespace's names in the
// database is one Simba created (a base table with Simba's columns, the
// sessions table among them) and, if none exists, that no procedure of its
// names does either, before anything is created or changed (ADR 0172); it
// reads the installed version. It only reads.
func (b *Backend) survey(ctx context.Context, q rowsQuerier) (core.Installed, error) {
	suffixes := make([]string, 0, len(ourTables))
	for s := range ourTables {
		suffixes = append(suffixes, s)
	}
	slices.Sort(suffixes)
	list, args := inList(b.prefix, suffixes)
	foreign := func(table, why string) error {
		return fmt.Errorf("mysqlsimba: namespace %q: table %s is not one Simba created (%s): %w: Simba never alters or writes a table it did not create (ADR 0172); use another namespace, or rename the table",
			b.prefix, table, why, sqlbackend.ErrForeignTable)
	}
	seen := map[string]map[string]bool{}
	// Two queries, each with the database and the table names as
	// constants: information_schema then opens those tables only. A join
	// of tables with columns made MariaDB fill columns from every table
	// and view of every database on the server at each New ("Scanned all
	// databases"): slow on a large server, and a shared 10.11 server died
	// running it (signal 11 while opening a view's structure).
	rows, err := q.QueryContext(ctx, fmt.Sprintf(surveyTablesSQL, list), args...)
	if err != nil {
		return core.Installed{}, err
	}
	for rows.Next() {
		var table, kind string
		if err := rows.Scan(&table, &kind); err != nil {
			rows.Close()
			return core.Installed{}, err
		}
		if kind != "BASE TABLE" {
			rows.Close()
			return core.Installed{}, foreign(table, "a "+strings.ToLower(kind)+", not a table")
		}
		seen[table] = map[string]bool{}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return core.Installed{}, err
	}
	if len(seen) > 0 {
		rows, err := q.QueryContext(ctx, fmt.Sprintf(surveyColumnsSQL, list), args...)
		if err != nil {
			return core.Installed{}, err
		}
		defer rows.Close()
		for rows.Next() {
			var table, name, typ string
			if err := rows.Scan(&table, &name, &typ); err != nil {
				return core.Installed{}, err
			}
			if seen[table] == nil {
				continue // created since the first query: the next New sees it whole
			}
			want := ourTables[strings.TrimPrefix(table, b.prefix)]
			i := slices.IndexFunc(want, func(w column) bool { return w.name == name })
			switch {
			case i < 0:
				return core.Installed{}, foreign(table, "column "+name+" is not one of Simba's")
			case !strings.EqualFold(want[i].typ, typ):
				return core.Installed{}, foreign(table, fmt.Sprintf("column %s is %s, Simba's is %s", name, typ, want[i].typ))
			}
			seen[table][name] = true
		}
		if err := rows.Err(); err != nil {
			return core.Installed{}, err
		}
	}
	for table, got := range seen {
		for _, w := range ourTables[strings.TrimPrefix(table, b.prefix)] {
			if w.required && !got[w.name] {
				return core.Installed{}, foreign(table, "no column "+w.name)
			}
		}
	}
	if len(seen) > 0 && seen[b.prefix+"_sessions"] == nil {
		for _, s := range suffixes {
			if seen[b.prefix+s] != nil {
				return core.Installed{}, foreign(b.prefix+s, "the namespace has no "+b.prefix+"_sessions, which every version of Simba creates first")
			}
		}
	}
	if len(seen) == 0 {
		list, args := inList(b.prefix, ourRoutines)
		var fn string
		err := q.QueryRowContext(ctx, `SELECT routine_name FROM information_schema.routines
 WHERE routine_schema = DATABASE() AND routine_name IN (`+list+`) ORDER BY 1 LIMIT 1`, args...).Scan(&fn)
		switch {
		case err == nil:
			return core.Installed{}, fmt.Errorf("mysqlsimba: namespace %q: procedure %s exists without the namespace's tables: %w: Simba never replaces a routine it did not create; drop it if it is left from a dropped namespace, or use another namespace",
				b.prefix, fn, sqlbackend.ErrForeignTable)
		case !errors.Is(err, sql.ErrNoRows):
			return core.Installed{}, err
		}
		return core.Installed{}, nil
	}
	if seen[b.prefix+"_schema"] == nil {
		return core.Installed{Version: 1, CompatibleFrom: 1}, nil
	}
	var in core.Installed
	err = q.QueryRowContext(ctx, b.q.version).Scan(&in.Version, &in.CompatibleFrom)
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("%w: table %s_schema is empty", core.ErrBadReply, b.prefix)
	}
	return in, err
}

// autocommitOn refuses a session whose autocommit is off (DSN
// autocommit=0, init_connect, the server's default): each statement would
// leave a transaction open on the pool's connection, so the procedures'
// SET TRANSACTION fails (1568) at every call, and a read left open keeps
// its REPEATABLE READ view, so Inspect would go on showing what it saw
// first.
func autocommitOn(ctx context.Context, q querier) error {
	var on int
	if err := q.QueryRowContext(ctx, "SELECT @@SESSION.autocommit").Scan(&on); err != nil {
		return err
	}
	if on == 0 {
		return fmt.Errorf("%w: autocommit is off on the handle's connections (a DSN autocommit=0, init_connect, or the server's autocommit): each statement would leave a transaction open, every call would fail with error 1568 and reads would stay in their first snapshot; give Simba a handle with autocommit on (each procedure runs its own transactions)", sqlbackend.ErrSessionSetting)
	}
	return nil
}

// writable refuses a read-only session (tx_read_only, read_only on the
// server, a replica): every call of a session writes.
func writable(ctx context.Context, q querier) error {
	var txRO, serverRO int
	// transaction_read_only on MySQL 8 (which dropped tx_read_only) and
	// MariaDB 11.1+; tx_read_only on older MariaDB.
	err := q.QueryRowContext(ctx, "SELECT @@session.transaction_read_only, @@global.read_only").Scan(&txRO, &serverRO)
	if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE
		err = q.QueryRowContext(ctx, "SELECT @@session.tx_read_only, @@global.read_only").Scan(&txRO, &serverRO)
	}
	if err != nil {
		return err
	}
	if txRO != 0 || serverRO != 0 {
		return fmt.Errorf("%w: the session's transactions are read-only (tx_read_only = %d, read_only = %d), and every call of a session writes; connect to the primary with a session that may write (OpenExisting only reads)", sqlbackend.ErrReadOnly, txRO, serverRO)
	}
	return nil
}
