package mysqlsimba

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
	"github.com/simba-go/simba/session/driver"
)

// Option configures [New].
type Option func(*config)

type config struct {
	prefix       string
	createSchema bool
}

// WithPrefix sets the table prefix, which names the namespace (default
// [sqlbackend.DefaultPrefix]). It must pass [sqlbackend.ValidatePrefix];
// New returns the error otherwise.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithoutSchemaCreation makes [New] assume the tables and procedures exist
// (created from [Schema] by a migration tool) instead of creating them.
func WithoutSchemaCreation() Option { return func(c *config) { c.createSchema = false } }

// Backend is a [driver.Backend] on MySQL or MariaDB. It does not broadcast
// releases: candidates find free leases by polling, as the specification
// says for SQL. It is safe for concurrent use and may serve many sessions.
type Backend struct {
	core   core.Backend
	db     *sql.DB
	prefix string
	stmts  statements
}

var _ driver.Backend = (*Backend)(nil)

// New returns a backend on the user's database handle (opened with
// go-sql-driver/mysql). Unless [WithoutSchemaCreation] is given it creates
// the namespace's tables and procedures if they are missing, which is safe
// when many processes start at once. It prepares its five calls; release
// them with [Backend.Shutdown]. The handle stays the caller's.
//
// It needs MariaDB 10.1.3 or MySQL 8.0.29 or later (CREATE PROCEDURE IF
// NOT EXISTS), InnoDB, and the privileges to create tables and routines
// and to execute them.
func New(ctx context.Context, db *sql.DB, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, errors.New("mysqlsimba: nil db")
	}
	c := config{prefix: sqlbackend.DefaultPrefix, createSchema: true}
	for _, o := range opts {
		o(&c)
	}
	if err := sqlbackend.ValidatePrefix(c.prefix); err != nil {
		return nil, fmt.Errorf("mysqlsimba: %w", err)
	}
	b := &Backend{db: db, prefix: c.prefix}
	b.core = core.Backend{Store: store{b}, Label: "mysqlsimba", Retryable: deadlocked}
	if c.createSchema {
		if err := b.createSchema(ctx); err != nil {
			return nil, err
		}
	}
	if err := b.stmts.prepare(ctx, db, c.prefix); err != nil {
		return nil, fmt.Errorf("mysqlsimba: prepare: %w", err)
	}
	return b, nil
}

// Schema returns the SQL statements that create the tables and procedures
// of the namespace named by prefix, for users who run migrations
// themselves (see [WithoutSchemaCreation]). Run them one by one.
func Schema(prefix string) ([]string, error) {
	out := make([]string, len(schema))
	for i, s := range schema {
		var err error
		if out[i], err = core.Expand(strings.TrimSpace(s), prefix); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (b *Backend) createSchema(ctx context.Context) (err error) {
	stmts, err := Schema(b.prefix)
	if err != nil {
		return fmt.Errorf("mysqlsimba: %w", err)
	}
	conn, err := b.db.Conn(ctx) // GET_LOCK belongs to one connection
	if err != nil {
		return fmt.Errorf("mysqlsimba: create schema: %w", err)
	}
	defer conn.Close()
	lock := "simba-schema:" + b.prefix
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", lock).Scan(&got); err != nil || got.Int64 != 1 {
		return fmt.Errorf("mysqlsimba: create schema %q: GET_LOCK = %v: %w", b.prefix, got, errors.Join(err, errors.New("lock not granted")))
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lock); rerr != nil && err == nil {
			err = fmt.Errorf("mysqlsimba: create schema %q: release lock: %w", b.prefix, rerr)
		}
	}()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
		}
	}
	return nil
}

// Shutdown closes the backend's prepared statements. The database handle
// is the caller's and stays open. Later calls fail with an error wrapping
// driver.ErrClosed.
func (b *Backend) Shutdown() {
	b.core.Shut()
	b.stmts.closeAll()
}

// Open implements [driver.Backend]: a new session with a random 128-bit
// id, expiring the requested lease duration after now by the database
// clock.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	return b.core.Open(ctx, req)
}

// Renew implements [driver.Backend] in one call, whatever the number of
// leases; the owned leases are listed only when their version changed.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	return b.core.Renew(ctx, req)
}

// Acquire implements [driver.Backend] in one call for the whole batch.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	return b.core.Acquire(ctx, req)
}

// Release implements [driver.Backend] in one call.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	return b.core.Release(ctx, req)
}

// Close implements [driver.Backend]: it deletes the session and frees
// every lease it owned.
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	return b.core.Close(ctx, id)
}

type statements struct {
	open, renew, acquire, release, closeID *sql.Stmt
}

func (s *statements) prepare(ctx context.Context, db *sql.DB, prefix string) error {
	for _, p := range []struct {
		dst  **sql.Stmt
		text string
	}{
		{&s.open, "CALL {p}_open_v1(?, ?)"},
		{&s.renew, "CALL {p}_renew_v1(?, ?)"},
		{&s.acquire, "CALL {p}_acquire_v1(?, ?)"},
		{&s.release, "CALL {p}_release_v1(?, ?, ?)"},
		{&s.closeID, "CALL {p}_close_v1(?)"},
	} {
		text, err := core.Expand(p.text, prefix)
		if err != nil {
			return err
		}
		// A prepared statement makes each call one round trip (execute),
		// not two (prepare, execute).
		if *p.dst, err = db.PrepareContext(ctx, text); err != nil {
			s.closeAll()
			return err
		}
	}
	return nil
}

func (s *statements) closeAll() {
	for _, st := range []*sql.Stmt{s.open, s.renew, s.acquire, s.release, s.closeID} {
		if st != nil {
			st.Close()
		}
	}
}

// store is the MySQL [core.Store]: one procedure call per method.
type store struct{ b *Backend }

func (s store) Open(ctx context.Context, id string, leaseUS int64) (int64, error) {
	var rem int64
	err := s.b.stmts.open.QueryRowContext(ctx, id, leaseUS).Scan(&rem)
	return rem, err
}

func (s store) Renew(ctx context.Context, id string, known uint64) (core.RenewResult, bool, error) {
	rows, err := s.b.stmts.renew.QueryContext(ctx, id, int64(known))
	if err != nil {
		return core.RenewResult{}, false, err
	}
	defer rows.Close()
	var r core.RenewResult
	header := false
	for rows.Next() {
		var rem, ver, token sql.NullInt64
		var name sql.NullString
		if err := rows.Scan(&rem, &ver, &name, &token); err != nil {
			return core.RenewResult{}, false, err
		}
		switch {
		case !name.Valid && rem.Valid && ver.Valid:
			header = true
			r.RemainingUS, r.Version = rem.Int64, uint64(ver.Int64)
		case name.Valid && token.Valid:
			r.Leases = append(r.Leases, driver.Lease{Name: name.String, Token: uint64(token.Int64)})
		default:
			return core.RenewResult{}, false, core.ErrBadReply
		}
	}
	if err := rows.Err(); err != nil {
		return core.RenewResult{}, false, err
	}
	return r, header, nil
}

func (s store) Acquire(ctx context.Context, id string, names []string) ([]uint64, bool, error) {
	var out string
	err := s.b.stmts.acquire.QueryRowContext(ctx, id, strings.Join(names, ",")).Scan(&out)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	parts := strings.Split(out, ",")
	if len(parts) != len(names) {
		return nil, false, fmt.Errorf("%w: %d tokens for %d names", core.ErrBadReply, len(parts), len(names))
	}
	tokens := make([]uint64, len(parts))
	for i, p := range parts {
		if tokens[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return nil, false, fmt.Errorf("%w: token %q: %v", core.ErrBadReply, p, err)
		}
	}
	return tokens, true, nil
}

func (s store) Release(ctx context.Context, id string, leases []driver.Lease) error {
	var names, tokens strings.Builder
	for i, l := range leases {
		if i > 0 {
			names.WriteByte(',')
			tokens.WriteByte(',')
		}
		names.WriteString(l.Name)
		tokens.WriteString(strconv.FormatUint(l.Token, 10))
	}
	_, err := s.b.stmts.release.ExecContext(ctx, id, names.String(), tokens.String())
	return err
}

func (s store) Close(ctx context.Context, id string) error {
	_, err := s.b.stmts.closeID.ExecContext(ctx, id)
	return err
}

// deadlocked reports InnoDB's deadlock victim (ER_LOCK_DEADLOCK, 1213):
// its transaction was rolled back whole, so the call may run again.
func deadlocked(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}
