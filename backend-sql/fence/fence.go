package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/term"
)

// ErrStale is returned by a guard when a higher token has already written
// under the name: the caller's term is over, and its write must not
// happen. Roll the transaction back. It is [term.ErrFenced] (the same
// value), which the Redis fencing helper returns too.
var ErrStale = term.ErrFenced

// Dialect is the SQL dialect of a [Table].
type Dialect int

// The dialects.
const (
	Postgres Dialect = iota + 1
	MySQL
)

// Table is a fencing table, "<prefix>_fence": one row per lease name with
// the highest token that wrote under it.
type Table struct {
	d                     Dialect
	create, guard, latest string
	// name is the table's name, for the shape check and its errors.
	name string
	// only refuses, on PostgreSQL, a second table of the name in another
	// schema than the one create makes or finds (run before create).
	only string
}

// Option configures [New].
type Option func(*options)

type options struct{ schema string }

// InSchema binds a PostgreSQL fencing table to a schema: every statement
// names it, so the guard finds the same table whatever the search_path of
// the transaction it runs in (ADR 0175). Without it the table is the one
// the search_path resolves "<prefix>_fence" to, and every writer's
// search_path must resolve it to the same one.
func InSchema(schema string) Option { return func(o *options) { o.schema = schema } }

// New returns the fencing table of prefix (which must pass
// [github.com/simba-go/simba/backend-sql.ValidatePrefix]) in dialect d. It does not touch the
// database; see [Table.Create].
func New(prefix string, d Dialect, opts ...Option) (*Table, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var create, guard, latest, only string
	switch d {
	case Postgres:
		only = onlyTable
		create = `CREATE TABLE IF NOT EXISTS {p}_fence (name text PRIMARY KEY, token bigint NOT NULL)`
		// The WHERE makes the upsert a no-op (0 rows) for a lower token;
		// ON CONFLICT waits for a concurrent writer's row lock first.
		guard = `INSERT INTO {p}_fence AS f (name, token) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token`
	case MySQL:
		create = `CREATE TABLE IF NOT EXISTS {p}_fence (
    name  VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    token BIGINT NOT NULL
) ENGINE=InnoDB`
		// MySQL's affected-rows count cannot tell "set to the same token"
		// from "kept a higher one", so read the row back, with a locking
		// read: it sees the latest commit, not the transaction's snapshot.
		guard = `INSERT INTO {p}_fence (name, token) VALUES (?, ?)
ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))`
		latest = `SELECT token FROM {p}_fence WHERE name = ? FOR UPDATE`
	default:
		return nil, fmt.Errorf("fence: unknown dialect %d", d)
	}
	if o.schema != "" {
		if d != Postgres || o.schema == "" || len(o.schema) > 63 || strings.ContainsAny(o.schema, "\x00\"'$\\") {
			return nil, fmt.Errorf("fence: InSchema(%q): want a PostgreSQL table and a schema of 1 to 63 bytes without NUL, quotes, $ or backslash", o.schema)
		}
		// Every reference to the table, and only those, is qualified.
		for _, q := range []*string{&create, &guard, &only} {
			*q = strings.ReplaceAll(*q, "{p}_fence", `"`+o.schema+`".{p}_fence`)
		}
		only = strings.ReplaceAll(only, `'"`+o.schema+`".{p}_fence' AND`, `'{p}_fence' AND`)
	}
	t := &Table{d: d, name: prefix + "_fence"}
	for _, s := range []struct {
		dst  *string
		text string
	}{{&t.create, create}, {&t.guard, guard}, {&t.latest, latest}, {&t.only, only}} {
		var err error
		if *s.dst, err = core.Expand(s.text, prefix); err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
	}
	return t, nil
}

// CreateSQL is the statement that creates the table if it is missing.
// [Table.Create] and [Table.CreatePgx] on PostgreSQL first refuse a table
// of the name in another schema (ADR 0175); CreateSQL alone does not.
func (t *Table) CreateSQL() string { return t.create }

// SQLDB is what [Table.Create] needs of a database/sql handle: *sql.DB,
// *sql.Conn and *sql.Tx have it.
type SQLDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Create runs [Table.CreateSQL] on db (a *sql.DB, *sql.Conn or *sql.Tx).
// A table of the name that exists but is not a fencing table (another
// shape: an application's own table) is refused with an error wrapping
// [sqlbackend.ErrForeignTable], before anything is written: guards on it
// could compare tokens as text, and let a lower one pass.
func (t *Table) Create(ctx context.Context, db SQLDB) error {
	if t.only != "" {
		if _, err := db.ExecContext(ctx, t.only); err != nil {
			return createError(err)
		}
	}
	if t.d == MySQL {
		if err := t.mysqlShape(ctx, db); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, t.create); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	return nil
}

// onlyTable refuses a fencing table of the name in another schema than
// the one the statements resolve it to (or would create it in): writers
// whose search_path differ would guard against different tables, and
// neither would see the other's tokens (ADR 0175). SQLSTATE SX003.
const onlyTable = `DO $fence$
DECLARE
    v_other text;
BEGIN
    SELECT string_agg(n.nspname, ', ' ORDER BY n.nspname) INTO v_other
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relname = '{p}_fence' AND c.relkind = 'r' AND n.nspname !~ '^pg_(toast_)?temp_'
       AND c.oid IS DISTINCT FROM pg_catalog.to_regclass('{p}_fence');
    IF v_other IS NOT NULL THEN
        RAISE EXCEPTION 'table {p}_fence exists in schema % as well: one fencing table per prefix per database (guards against two tables do not see each other''s tokens): drop the one not in use, or name its schema with fence.InSchema', v_other
            USING ERRCODE = 'SX003';
    END IF;
    -- The table the statements resolve to, if it exists, must be a
    -- fencing table: exactly name (its primary key) and token bigint NOT
    -- NULL, a table, not a view.
    IF pg_catalog.to_regclass('{p}_fence') IS NOT NULL THEN
        SELECT string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
                          || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum)
          INTO v_other
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = pg_catalog.to_regclass('{p}_fence') AND a.attnum > 0 AND NOT a.attisdropped;
        IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass('{p}_fence')) <> 'r'
           OR v_other !~ '^name [^,]+ not null, token bigint not null$'
           OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                           WHERE i.indrelid = pg_catalog.to_regclass('{p}_fence') AND i.indisprimary
                             AND i.indnatts = 1 AND i.indkey[0] = 1) THEN
            RAISE EXCEPTION 'table {p}_fence is not a fencing table Simba created (columns: %; want name PRIMARY KEY, token bigint NOT NULL): Simba never writes a table it did not create: use another prefix, or rename the table', v_other
                USING ERRCODE = 'SX004';
        END IF;
    END IF;
END $fence$`

// mysqlShape refuses a table of the name that exists but is not a fencing
// table: exactly the columns name (the primary key) and token BIGINT NOT
// NULL, a base table. Two queries with the table's name as a constant
// (information_schema then opens that table alone; see mysqlsimba's
// survey).
func (t *Table) mysqlShape(ctx context.Context, db SQLDB) error {
	foreign := func(why string) error {
		return fmt.Errorf("fence: create table: table %s is not a fencing table Simba created (%s; want name PRIMARY KEY, token BIGINT NOT NULL): %w: Simba never writes a table it did not create: use another prefix, or rename the table",
			t.name, why, sqlbackend.ErrForeignTable)
	}
	var kind string
	rows, err := db.QueryContext(ctx, `SELECT table_type FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, t.name)
	if err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	for rows.Next() {
		if err := rows.Scan(&kind); err != nil {
			rows.Close()
			return fmt.Errorf("fence: create table: %w", err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	switch kind {
	case "":
		return nil // missing: CREATE TABLE makes it
	case "BASE TABLE":
	default:
		return foreign("a " + strings.ToLower(kind))
	}
	rows, err = db.QueryContext(ctx, `SELECT column_name, data_type, column_key, is_nullable FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`, t.name)
	if err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var name, typ, key, null string
		if err := rows.Scan(&name, &typ, &key, &null); err != nil {
			return fmt.Errorf("fence: create table: %w", err)
		}
		cols = append(cols, strings.ToLower(name+" "+typ+" "+key+" "+null))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	if got := strings.Join(cols, ", "); len(cols) != 2 || !strings.HasPrefix(cols[0], "name ") || !strings.HasSuffix(cols[0], " pri no") ||
		cols[1] != "token bigint  no" {
		return foreign("columns: " + got)
	}
	return nil
}

// createError wraps a refusal of onlyTable in
// [sqlbackend.ErrSchemaConflict] (another schema's table) or
// [sqlbackend.ErrForeignTable] (a table of another shape).
func createError(err error) error {
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "SX003" {
		return fmt.Errorf("fence: create table: %s: %w", pe.Message, sqlbackend.ErrSchemaConflict)
	}
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "SX004" {
		return fmt.Errorf("fence: create table: %s: %w", pe.Message, sqlbackend.ErrForeignTable)
	}
	return fmt.Errorf("fence: create table: %w", err)
}

// CreatePgx runs [Table.CreateSQL] on a pgx pool, connection or
// transaction.
func (t *Table) CreatePgx(ctx context.Context, db PgxExecer) error {
	if t.only != "" {
		if _, err := db.Exec(ctx, t.only); err != nil {
			return createError(err)
		}
	}
	if _, err := db.Exec(ctx, t.create); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	return nil
}

// PgxExecer is what [Table.GuardPgx] needs of a pgx transaction: pgx.Tx,
// *pgx.Conn and *pgxpool.Pool have it (only a transaction makes sense for
// a guard).
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SQLTx is what [Table.Guard] needs of a database/sql transaction (*sql.Tx).
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func check(name string, token uint64) error {
	if err := deadline.ValidateName(name); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("fence: token %d out of range (1 to 2^63-1)", token)
	}
	return nil
}

// GuardPgx records token for name in tx unless a higher token is recorded,
// in which case it returns an error wrapping [ErrStale]. The table's
// dialect must be [Postgres]. Run it in the transaction of the write it
// guards, before the write.
func (t *Table) GuardPgx(ctx context.Context, tx PgxExecer, name string, token uint64) error {
	if err := check(name, token); err != nil {
		return err
	}
	if t.d != Postgres {
		return errors.New("fence: GuardPgx needs a Postgres table")
	}
	tag, err := tx.Exec(ctx, t.guard, name, int64(token))
	if err != nil {
		return fmt.Errorf("fence: guard %s#%d: %w", name, token, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("fence: %s#%d: %w", name, token, ErrStale)
	}
	return nil
}

// Guard is [Table.GuardPgx] for a database/sql transaction, on PostgreSQL
// or MySQL/MariaDB according to the table's dialect.
func (t *Table) Guard(ctx context.Context, tx SQLTx, name string, token uint64) error {
	if err := check(name, token); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, t.guard, name, int64(token))
	if err != nil {
		return fmt.Errorf("fence: guard %s#%d: %w", name, token, err)
	}
	if t.d == Postgres {
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("fence: guard %s#%d: %w", name, token, err)
		}
		if n == 0 {
			return fmt.Errorf("fence: %s#%d: %w", name, token, ErrStale)
		}
		return nil
	}
	var latest int64
	if err := tx.QueryRowContext(ctx, t.latest, name).Scan(&latest); err != nil {
		return fmt.Errorf("fence: guard %s#%d: %w", name, token, err)
	}
	if latest != int64(token) {
		return fmt.Errorf("fence: %s#%d (table has #%d): %w", name, token, latest, ErrStale)
	}
	return nil
}
