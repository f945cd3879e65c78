package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgconn"

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
}

// New returns the fencing table of prefix (which must pass
// [github.com/simba-go/simba/backend-sql.ValidatePrefix]) in dialect d. It does not touch the
// database; see [Table.Create].
func New(prefix string, d Dialect) (*Table, error) {
	var create, guard, latest string
	switch d {
	case Postgres:
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
	t := &Table{d: d}
	for _, s := range []struct {
		dst  *string
		text string
	}{{&t.create, create}, {&t.guard, guard}, {&t.latest, latest}} {
		var err error
		if *s.dst, err = core.Expand(s.text, prefix); err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
	}
	return t, nil
}

// CreateSQL is the statement that creates the table if it is missing.
func (t *Table) CreateSQL() string { return t.create }

// Create runs [Table.CreateSQL] on db (a *sql.DB, *sql.Conn or *sql.Tx).
func (t *Table) Create(ctx context.Context, db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}) error {
	if _, err := db.ExecContext(ctx, t.create); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	return nil
}

// CreatePgx runs [Table.CreateSQL] on a pgx pool, connection or
// transaction.
func (t *Table) CreatePgx(ctx context.Context, db PgxExecer) error {
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
