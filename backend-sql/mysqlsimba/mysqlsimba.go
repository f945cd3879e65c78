package mysqlsimba

import (
	"context"
	"crypto/md5"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
	"github.com/simba-go/simba/session/driver"
)

// schemaVersion is the version of the tables and routines this code calls
// (docs/adr/0081-sql-schema-versions.md; the versions are listed in
// internal/core/schema.go). Version 4 is MySQL/MariaDB's alone.
const schemaVersion = 5

// Option configures [New].
type Option func(*config)

type config struct {
	prefix       string
	createSchema bool
	existing     bool // OpenExisting
	maxLease     time.Duration
	maxLockDelay time.Duration
}

// WithNamespace sets the namespace (default [sqlbackend.DefaultPrefix]),
// which prefixes the names of its tables and routines. It must pass
// [sqlbackend.ValidatePrefix]; New returns the error otherwise, which
// errors.Is matches against [deadline.ErrInvalidName] as on every backend.
func WithNamespace(ns string) Option { return func(c *config) { c.prefix = ns } }

// WithPrefix is the former name of [WithNamespace].
//
// Deprecated: use [WithNamespace], the option's name on every backend.
func WithPrefix(prefix string) Option { return WithNamespace(prefix) }

// WithMaxLease caps the lease of every session (default 30s): a session
// asking for more is granted this much. It is also the length of the
// quarantine after the namespace's tables lost their rows (ADR 0130): no
// lease is granted until one maximum lease after the loss was noticed, so
// no term granted before it is still believed in. Every process of a
// namespace must use the same cap: whichever process notices a loss sets the
// quarantine from its own cap, so one with a smaller cap than the others
// would end it before their terms (a holder cut off from the database
// believes until its deadline). Processes of older versions do not cap
// their sessions at all.
func WithMaxLease(d time.Duration) Option { return func(c *config) { c.maxLease = d } }

// WithMaxLockDelay is the longest lock-delay an Acquire may ask for
// (default 0: every positive delay is refused with an error wrapping
// driver.ErrLockDelay). A name whose holder's session expired without a
// release stays refused until the server's clock passes the session's
// expiry plus the delay its grant recorded (ADR 0251, 0252). It lengthens
// the quarantine after a data loss to WithMaxLease + WithMaxLockDelay.
// Every process of a namespace must use the same maximum.
func WithMaxLockDelay(d time.Duration) Option { return func(c *config) { c.maxLockDelay = d } }

// WithoutSchemaCreation makes [New] assume the tables and procedures exist
// (created from [Schema] by a migration tool) instead of creating them.
func WithoutSchemaCreation() Option { return func(c *config) { c.createSchema = false } }

// OpenExisting makes [New] open a namespace that exists, only reading: it
// creates and migrates nothing, and returns an error wrapping
// [sqlbackend.ErrUnknownNamespace], naming the namespace, when nothing of
// it is installed, or one wrapping [sqlbackend.ErrSchemaVersion] when its
// schema is one it cannot read (version 1, or a newer incompatible one);
// an older version that processes not yet upgraded run on is read as it
// is. It works on a read-only session (a
// replica, tx_read_only), for tools that only look: [Backend.Inspect]
// reads, while sessions, which write, fail there.
func OpenExisting() Option {
	return func(c *config) { c.createSchema, c.existing = false, true }
}

// Backend is a [driver.Backend] on MySQL or MariaDB. It does not broadcast
// releases: candidates find free leases by polling, as the specification
// says for SQL ([Notifier] is the one that does, on MariaDB). It is safe
// for concurrent use and may serve many sessions.
type Backend struct {
	core         core.Backend
	db           *sql.DB
	prefix       string
	createSchema bool
	existing     bool // OpenExisting: New checked the schema
	q            queries

	mu    sync.Mutex // guards stmts and bound while they are prepared or closed
	stmts statements // prepared by the first call (core.Backend.Ready)
	shut  bool       // Shutdown has closed stmts; guarded by mu
	// mariadb is set by the first call (before every other): the server
	// runs SET STATEMENT, so acquire and release call the version 4
	// routines under it (ADR 0144). MySQL keeps the version 3 ones.
	mariadb bool
	// bound holds the acquire and release statements of each lock-wait
	// bound in seconds (SET STATEMENT takes a literal only), prepared
	// when first needed; guarded by mu.
	bound map[int64]*boundStmts
	// notify is the release notices' state of a Notifier (ADR 0145); nil
	// for a Backend.
	notify *notifier
}

// boundStmts are acquire_v3 and release_v3 under one SET STATEMENT bound.
type boundStmts struct{ acquire, release *sql.Stmt }

// maxBoundS is the longest lock-wait bound, in seconds, that calls the
// version 4 routines: few distinct bounds are prepared (the engine's
// calls use the renewal period less a little: 4 s by default). A longer
// one (a WithMaxLease over a minute and a call without a deadline, or a
// renewal period over a minute) calls the version 3 routine, which sets
// the same bound itself.
const maxBoundS = 60

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
)

// New returns a backend on the user's database handle (opened with
// go-sql-driver/mysql). Unless [WithoutSchemaCreation] is given it creates
// the namespace's tables and procedures if they are missing, or migrates
// them to the schema version this code needs, which is safe when many
// processes start at once. With WithoutSchemaCreation it does not touch the
// database: the first call checks the schema version. The first call also
// prepares the backend's statements; release them with
// [Backend.Shutdown]. The handle stays the caller's.
//
// It needs MariaDB 10.1.3 or MySQL 8.0.29 or later (CREATE PROCEDURE IF
// NOT EXISTS), InnoDB, and the privileges to create tables and routines
// and to execute them.
func New(ctx context.Context, db *sql.DB, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, errors.New("mysqlsimba: nil db")
	}
	c := config{prefix: sqlbackend.DefaultPrefix, createSchema: true, maxLease: core.DefaultMaxLease}
	for _, o := range opts {
		o(&c)
	}
	if err := core.CheckMaxLease("mysqlsimba", c.maxLease); err != nil {
		return nil, err
	}
	if err := core.CheckMaxLockDelay("mysqlsimba", c.maxLockDelay); err != nil {
		return nil, err
	}
	if err := sqlbackend.ValidatePrefix(c.prefix); err != nil {
		return nil, fmt.Errorf("mysqlsimba: %w", err)
	}
	q, err := newQueries(c.prefix)
	if err != nil {
		return nil, fmt.Errorf("mysqlsimba: %w", err)
	}
	b := &Backend{db: db, prefix: c.prefix, createSchema: c.createSchema, q: q}
	b.core = core.Backend{Store: store{b}, Label: "mysqlsimba", Retryable: deadlocked, Ready: b.ready, MaxLease: c.maxLease, MaxLockDelay: c.maxLockDelay}
	switch {
	case c.createSchema:
		if err := b.installSchema(ctx); err != nil {
			return nil, err
		}
	case c.existing:
		if err := autocommitOn(ctx, b.db); err != nil {
			return nil, fmt.Errorf("mysqlsimba: namespace %q: %w", b.prefix, err)
		}
		in, err := b.survey(ctx, b.db)
		if err != nil {
			return nil, fmt.Errorf("mysqlsimba: open namespace %q: %w", b.prefix, err)
		}
		if in.Version == 0 {
			return nil, fmt.Errorf("mysqlsimba: namespace %q: %w: no table of it in the database; check the name, or start the application once to create it", b.prefix, sqlbackend.ErrUnknownNamespace)
		}
		// Only reading: older versions too (a rolling upgrade).
		if err := core.CheckReadable("mysqlsimba", b.prefix, in, schemaVersion); err != nil {
			return nil, err
		}
		b.existing = true
	}
	return b, nil
}

// ready runs before the first call: it checks the schema version (when New
// did not) and prepares the statements.
func (b *Backend) ready(ctx context.Context) error {
	if !b.createSchema && !b.existing {
		if err := b.checkSchema(ctx); err != nil {
			return err
		}
	}
	var version string
	if err := b.db.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return driver.ErrClosed
	}
	if err := b.stmts.prepare(ctx, b.db, b.q); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	b.mariadb = strings.Contains(version, "MariaDB")
	return nil
}

// boundFor returns the version 4 acquire and release statements for a
// lock-wait bound of waitMS (ADR 0135's rounding: whole seconds, down,
// at least 1), or nil when the version 3 routines are to be called: on
// MySQL, or for a bound over maxBoundS.
func (b *Backend) boundFor(ctx context.Context, waitMS int64) (*boundStmts, error) {
	n, ok := b.boundS(waitMS)
	if !ok {
		return nil, nil
	}
	b.mu.Lock()
	bs, shut := b.bound[n], b.shut
	b.mu.Unlock()
	if bs != nil || shut {
		return bs, nil // after Shutdown, the closed version 3 statements answer
	}
	acquireHint := 0
	if b.notify != nil {
		acquireHint = hintReport // a Notifier's calls through the pool
	}
	nb, err := b.q.prepareBound(ctx, b.db, n, acquireHint, 0)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if bs := b.bound[n]; bs != nil || b.shut {
		nb.close() // another call prepared them first, or Shutdown came
		return bs, nil
	}
	if b.bound == nil {
		b.bound = map[int64]*boundStmts{}
	}
	b.bound[n] = nb
	return nb, nil
}

// boundS is the lock-wait bound in seconds of a call of waitMS, and
// whether the version 4 routines are called with it (see boundFor).
func (b *Backend) boundS(waitMS int64) (int64, bool) {
	n := max(1, waitMS/1000)
	return n, b.mariadb && n <= maxBoundS
}

// preparer is a *sql.DB or a *sql.Conn.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// prepareBound prepares acquire_v3 and release_v3 under the bound of n
// seconds, with the hint arguments given.
func (q queries) prepareBound(ctx context.Context, p preparer, n int64, acquireHint, releaseHint int) (*boundStmts, error) {
	nb := &boundStmts{}
	var err error
	if nb.acquire, err = p.PrepareContext(ctx, fmt.Sprintf(q.acquireBound, n, acquireHint)); err == nil {
		nb.release, err = p.PrepareContext(ctx, fmt.Sprintf(q.releaseBound, n, releaseHint))
	}
	if err != nil {
		nb.close()
		return nil, err
	}
	return nb, nil
}

func (bs *boundStmts) close() {
	for _, st := range []*sql.Stmt{bs.acquire, bs.release} {
		if st != nil {
			st.Close()
		}
	}
}

// queries are the texts of every call, the prefix expanded.
type queries struct {
	open, renew, acquire, release, closeID string
	inspect, version                       string
	// acquireBound and releaseBound take the bound in seconds and the
	// hint argument (ADR 0145: 0 for a Backend), both %d.
	acquireBound, releaseBound string
}

// inspectSQL lists live holders; the condition on l.name is appended.
// UTC_TIMESTAMP(6) is read once per statement.
const inspectSQL = `SELECT l.name, l.token, l.session_id, COALESCE(s.owner, ''),
       GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), s.expires_at))
  FROM {p}_leases l JOIN {p}_sessions s ON s.id = l.session_id
 WHERE l.held = 1 AND s.expires_at > UTC_TIMESTAMP(6) AND `

func newQueries(prefix string) (queries, error) {
	var q queries
	for _, p := range []struct {
		dst  *string
		text string
	}{
		{&q.open, "CALL {p}_open_v4(?, ?, ?, ?, ?)"},
		{&q.renew, "CALL {p}_renew_v2(?, ?, ?, ?)"},
		{&q.acquire, "CALL {p}_acquire_v5(?, ?, ?, ?, ?)"},
		{&q.release, "CALL {p}_release_v5(?, ?, ?, ?)"},
		{&q.closeID, "CALL {p}_close_v3(?, ?)"},
		{&q.acquireBound, "SET STATEMENT innodb_lock_wait_timeout = %d FOR CALL {p}_acquire_v4(?, ?, ?, %d, ?)"},
		{&q.releaseBound, "SET STATEMENT innodb_lock_wait_timeout = %d FOR CALL {p}_release_v4(?, ?, ?, %d)"},
		{&q.inspect, inspectSQL},
		{&q.version, "SELECT version, compatible_from FROM {p}_schema WHERE id = 1"},
	} {
		var err error
		if *p.dst, err = core.Expand(p.text, prefix); err != nil {
			return queries{}, err
		}
	}
	return q, nil
}

// Schema returns the SQL statements that create the tables and procedures
// of the namespace named by prefix at the current schema version, for
// users who run migrations themselves (see [WithoutSchemaCreation]). Run
// them one by one, in order.
func Schema(prefix string) ([]string, error) { return Migration(prefix, 0) }

// Migration returns the SQL statements that bring the namespace named by
// prefix from schema version from (0: nothing installed; 1: the first
// releases, which recorded no version) to the version this code needs.
// Run them one by one, in order; the version is recorded by the last of
// each step. Processes still running the older code keep working on the
// upgraded schema; the backend refuses to run on an older one, naming this
// function.
//
// From 0 it creates a new namespace, ready at once: only for tables that
// do not exist. Its statements are idempotent, but run again on existing
// tables (a runbook that re-applies the schema after a restore or an
// emptying, say) it writes the epoch row and the markers back, which hides
// the loss of their rows: no quarantine, while a holder from before the
// loss may still believe (ADR 0130: as Init after a loss on Redis).
//
// From an older version the first acquisition afterwards starts one
// quarantine of a maximum lease (no lease granted meanwhile, held leases
// are kept): the tables it
// upgrades may have just been restored from an old backup, and the
// quarantine is what keeps two holders apart then (ADR 0130).
func Migration(prefix string, from int) ([]string, error) {
	if from < 0 || from > schemaVersion {
		return nil, fmt.Errorf("mysqlsimba: no migration from schema version %d (this code has version %d)", from, schemaVersion)
	}
	var src []string
	create := from == 0
	if create {
		src = append(src, schema...)
		from = 1
	}
	for v := from; v < schemaVersion; v++ {
		src = append(src, migrations[v]...)
	}
	if create {
		src = append(src, initEpoch)
	}
	return expandAll(src, prefix)
}

// expandAll expands the prefix into each statement.
func expandAll(src []string, prefix string) ([]string, error) {
	out := make([]string, len(src))
	for i, s := range src {
		var err error
		if out[i], err = core.Expand(strings.TrimSpace(s), prefix); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkSchema refuses a namespace whose installed schema this code cannot
// use, naming both versions and the migration.
func (b *Backend) checkSchema(ctx context.Context) error {
	if err := errors.Join(autocommitOn(ctx, b.db), writable(ctx, b.db)); err != nil {
		return fmt.Errorf("mysqlsimba: namespace %q: %w", b.prefix, err)
	}
	in, err := b.survey(ctx, b.db)
	if err != nil {
		return fmt.Errorf("mysqlsimba: read schema version of %q: %w", b.prefix, err)
	}
	return core.CheckSchema("mysqlsimba", b.prefix, in, "mysqlsimba.Migration", schemaVersion)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// columnAdded reports whether a migration that failed half way already
// added the sessions' column (MySQL has no ADD COLUMN IF NOT EXISTS;
// MariaDB does).
func (b *Backend) columnAdded(ctx context.Context, q querier, table, column string) (bool, error) {
	var n int
	if strings.HasPrefix(column, b.prefix+"_") { // a constraint (ADD CONSTRAINT <name>)
		err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.table_constraints
	    WHERE constraint_schema = DATABASE() AND table_name = ? AND constraint_name = ?`, table, column).Scan(&n)
		return n > 0, err
	}
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
	    WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, table, column).Scan(&n)
	return n > 0, err
}

// addsColumn reports the table and the column (or constraint) that an
// ALTER TABLE … ADD COLUMN (ADD CONSTRAINT) of a migration adds, which
// MySQL cannot make idempotent.
func addsColumn(stmt, prefix string) (table, column string, ok bool) {
	for _, t := range []string{"_sessions", "_leases"} {
		for _, what := range []string{" ADD COLUMN ", " ADD CONSTRAINT "} {
			if rest, found := strings.CutPrefix(stmt, "ALTER TABLE "+prefix+t+what); found {
				return prefix + t, strings.Fields(rest)[0], true
			}
		}
	}
	return "", "", false
}

// installSchema installs or migrates the namespace's schema under a named
// lock, then checks the result.
func (b *Backend) installSchema(ctx context.Context) error {
	if err := b.migrate(ctx); err != nil {
		return err
	}
	return b.checkSchema(ctx)
}

// createMode is the sql_mode the namespace's tables and procedures are
// created under (see migrate): modes both MySQL 8 and MariaDB know, none
// of which changes what the procedures' statements mean.
const createMode = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

func (b *Backend) migrate(ctx context.Context) (err error) {
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
	if err := errors.Join(autocommitOn(ctx, conn), writable(ctx, conn)); err != nil {
		return fmt.Errorf("mysqlsimba: namespace %q: %w", b.prefix, err)
	}
	// A procedure runs under the sql_mode it was created with, whatever
	// its caller's: created under the pool's (ORACLE's PL/SQL syntax,
	// EMPTY_STRING_IS_NULL turning the procedures' '' into NULL) it would
	// fail, or answer NULL, for every process. So this connection creates
	// them under one fixed mode and gets its own back after.
	var mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = ?", createMode); err != nil {
		return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION sql_mode = ?", mode); rerr != nil {
			// Never back to the pool with Simba's mode.
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("mysqlsimba: create schema %q: restore sql_mode: %w", b.prefix, rerr)
			}
		}
	}()
	// No max_statement_time for the migration (MariaDB; ADR 0285): its
	// work grows with the namespace (version 5 folds and deletes every
	// released row), and a bound against runaway queries would fail it at
	// every start. Its lock waits stay bounded by innodb_lock_wait_timeout
	// and lock_wait_timeout, the whole by ctx. MySQL has no such variable
	// (its max_execution_time bounds read-only SELECTs only).
	var maxTime sql.NullFloat64
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.max_statement_time").Scan(&maxTime); err != nil && !unknownVariable(err) {
		return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
	}
	if maxTime.Valid {
		if _, err := conn.ExecContext(ctx, "SET SESSION max_statement_time = 0"); err != nil {
			return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
		}
		defer func() {
			if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION max_statement_time = ?", maxTime.Float64); rerr != nil {
				// Never back to the pool without its bound.
				_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
				if err == nil {
					err = fmt.Errorf("mysqlsimba: create schema %q: restore max_statement_time: %w", b.prefix, rerr)
				}
			}
		}()
	}
	// Everything is checked before anything is created or changed (ADR
	// 0172): MySQL's DDL commits at once, so a refusal after the first
	// statement would leave it behind.
	in, err := b.survey(ctx, conn)
	if err != nil {
		return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
	}
	if in.Version >= schemaVersion {
		return nil
	}
	stmts, err := Migration(b.prefix, in.Version)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if table, col, ok := addsColumn(s, b.prefix); ok {
			if done, err := b.columnAdded(ctx, conn, table, col); err != nil || done {
				if err != nil {
					return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
				}
				continue
			}
		}
		if _, err := conn.ExecContext(ctx, s); err != nil {
			if denied(err) {
				return fmt.Errorf("mysqlsimba: create schema %q: %w: this user may not create or change the namespace's tables and procedures: it needs CREATE, ALTER, INDEX and CREATE ROUTINE on the database; grant them, or have a user that may run mysqlsimba.Migration and start with WithoutSchemaCreation", b.prefix, err)
			}
			return fmt.Errorf("mysqlsimba: create schema %q: %w", b.prefix, err)
		}
	}
	return nil
}

// denied reports a missing privilege: ER_DBACCESS_DENIED_ERROR (1044,
// MariaDB's answer to a CREATE PROCEDURE without CREATE ROUTINE),
// ER_TABLEACCESS_DENIED_ERROR (1142), ER_PROCACCESS_DENIED_ERROR (1370).
func denied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1044 || me.Number == 1142 || me.Number == 1370)
}

// Shutdown closes the backend's prepared statements. The database handle
// is the caller's and stays open. Later calls fail with an error wrapping
// driver.ErrClosed. It does no network wait, so ctx is not used; it takes
// one because every backend package's Shutdown has this shape (ADR 0061).
func (b *Backend) Shutdown(ctx context.Context) error {
	b.core.Shut()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shut = true
	b.stmts.closeAll()
	for _, bs := range b.bound {
		bs.close()
	}
	b.bound = nil
	return nil
}

// Inspect implements [driver.Inspector] with one query: the held leases
// of the names, or of the names starting with the prefix (a range on the
// ascii_bin primary key, so no pattern), whose session has not expired by
// the database clock.
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	return b.core.Inspect(ctx, req)
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
	rep, err := b.core.Renew(ctx, req)
	switch {
	case b.notify == nil:
	case errors.Is(err, driver.ErrExpired):
		b.notify.forget(ctx, string(req.ID)) // its leases are others' to take now
	case err == nil && rep.Full:
		b.notify.keepOnly(ctx, string(req.ID), rep.Leases)
	}
	return rep, err
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

func (s *statements) prepare(ctx context.Context, db *sql.DB, q queries) error {
	for _, p := range []struct {
		dst  **sql.Stmt
		text string
	}{
		{&s.open, q.open},
		{&s.renew, q.renew},
		{&s.acquire, q.acquire},
		{&s.release, q.release},
		{&s.closeID, q.closeID},
	} {
		// A prepared statement makes each call one round trip (execute),
		// not two (prepare, execute).
		var err error
		if *p.dst, err = db.PrepareContext(ctx, p.text); err != nil {
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
	*s = statements{}
}

// store is the MySQL [core.Store]: one procedure call per method.
type store struct{ b *Backend }

// quarantineUS is the quarantine open and renew start when they are the
// first to notice a loss (acquire is told by core): one maximum lease.
func (s store) quarantineUS() int64 { return s.b.core.QuarantineUS() }

func (s store) Open(ctx context.Context, id string, leaseUS int64, owner string, waitMS int64) (int64, error) {
	var rem int64
	err := s.b.stmts.open.QueryRowContext(ctx, id, leaseUS, owner, s.quarantineUS(), waitMS).Scan(&rem)
	return rem, err
}

// inspectBatch bounds the names of one inspect query.
const inspectBatch = 500

func (s store) Inspect(ctx context.Context, names []string, prefix string) ([]core.HolderRow, error) {
	if names == nil && prefix == "" {
		// Not as the empty prefix below: under EMPTY_STRING_IS_NULL the
		// server takes '' for NULL, and no name compares with NULL.
		return s.inspect(ctx, s.b.q.inspect+"TRUE")
	}
	if names == nil {
		// Every name is below 0x7f ([A-Za-z0-9._:-]), so [prefix,
		// prefix+0x7f) holds exactly the names starting with prefix.
		return s.inspect(ctx, s.b.q.inspect+"l.name >= ? AND l.name < CONCAT(?, CHAR(127 USING ascii))", prefix, prefix)
	}
	var out []core.HolderRow
	for batch := range slices.Chunk(names, inspectBatch) {
		args := make([]any, len(batch))
		for i, n := range batch {
			args[i] = n
		}
		rows, err := s.inspect(ctx, s.b.q.inspect+"l.name IN (?"+strings.Repeat(", ?", len(batch)-1)+")", args...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (s store) inspect(ctx context.Context, query string, args ...any) ([]core.HolderRow, error) {
	rows, err := s.b.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []core.HolderRow
	for rows.Next() {
		var h core.HolderRow
		var owner sql.NullString // NULL, not '', under EMPTY_STRING_IS_NULL
		if err := rows.Scan(&h.Name, &h.Token, &h.Session, &owner, &h.RemainingUS); err != nil {
			return nil, err
		}
		h.Owner = owner.String
		out = append(out, h)
	}
	return out, rows.Err()
}

func (s store) Renew(ctx context.Context, id string, known uint64, waitMS int64) (core.RenewResult, bool, error) {
	rows, err := s.b.stmts.renew.QueryContext(ctx, id, int64(known), s.quarantineUS(), waitMS)
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

// Acquire reads acquire_v3's (on MySQL acquire_v2's) one value: the
// tokens, comma-separated in the order of names, or "q" and the
// microseconds left while the namespace is quarantined; no row when the
// session has expired.
func (s store) Acquire(ctx context.Context, id string, names []string, quarantineUS, waitMS, delayUS int64) (core.AcquireResult, bool, error) {
	var out string
	var err error
	if n := s.b.notify; n != nil && len(names) == 1 {
		if bound, ok := s.b.boundS(waitMS); ok {
			// On the hint connection, which takes the name's hint if
			// it grants it (ADR 0145).
			err = n.onHintConn(ctx, bound, func(bs *boundStmts) error {
				return bs.acquire.QueryRowContext(ctx, id, names[0], quarantineUS, delayUS).Scan(&out)
			})
			if err == nil {
				n.granted(id, names[0], out)
			}
			return s.acquireResult(out, err, names)
		}
	}
	bs, err := s.b.boundFor(ctx, waitMS)
	if err != nil {
		return core.AcquireResult{}, false, err
	}
	// In (bucket, name) order, the order acquire_v4 locks in (ADR 0252);
	// the answer is mapped back to the order of names.
	order := byBucket(names)
	if bs != nil {
		err = bs.acquire.QueryRowContext(ctx, id, joinNames(order), quarantineUS, delayUS).Scan(&out)
	} else {
		err = s.b.stmts.acquire.QueryRowContext(ctx, id, joinNames(order), quarantineUS, waitMS, delayUS).Scan(&out)
	}
	r, ok, err := s.acquireResult(out, err, order)
	if err != nil || !ok || r.Tokens == nil || len(names) == 1 {
		return r, ok, err
	}
	at := make(map[string]uint64, len(order))
	for i, n := range order {
		at[n] = r.Tokens[i]
	}
	for i, n := range names {
		r.Tokens[i] = at[n]
	}
	return r, ok, nil
}

// bucket is a name's mark (ADR 0252): the first 10 bits of the MD5 of its
// bytes, as acquire_v4 computes it (CONV(LEFT(MD5(name), 3), 16, 10) >> 2).
// Here it only orders the names of a call; the routines compute their own.
func bucket(name string) int {
	h := md5.Sum([]byte(name))
	return (int(h[0])<<4 | int(h[1])>>4) >> 2
}

// byBucket is names ordered by (bucket, name); names itself when there is
// only one.
func byBucket(names []string) []string {
	if len(names) == 1 {
		return names
	}
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		if c := bucket(a) - bucket(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

// acquireResult reads an acquire routine's answer (see Acquire). A name
// answered "w" (refused, its wake-up hint held, ADR 0145) is refused:
// token 0, and a Notifier waits for the hint.
func (s store) acquireResult(out string, err error, names []string) (core.AcquireResult, bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return core.AcquireResult{}, false, nil
	}
	if err != nil {
		return core.AcquireResult{}, false, err
	}
	if q, ok := strings.CutPrefix(out, "q"); ok {
		us, err := strconv.ParseInt(q, 10, 64)
		if err != nil || us <= 0 {
			return core.AcquireResult{}, false, fmt.Errorf("%w: quarantine %q", core.ErrBadReply, out)
		}
		return core.AcquireResult{QuarantineUS: us}, true, nil
	}
	if len(names) == 1 && out != "w" { // the usual case: no split
		tok, err := strconv.ParseUint(out, 10, 64)
		if err != nil {
			return core.AcquireResult{}, false, fmt.Errorf("%w: token %q: %v", core.ErrBadReply, out, err)
		}
		return core.AcquireResult{Tokens: []uint64{tok}}, true, nil
	}
	parts := strings.Split(out, ",")
	if len(parts) != len(names) {
		return core.AcquireResult{}, false, fmt.Errorf("%w: %d tokens for %d names", core.ErrBadReply, len(parts), len(names))
	}
	tokens := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "w" {
			if s.b.notify != nil {
				s.b.notify.wait(names[i])
			}
			continue // token 0
		}
		if tokens[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return core.AcquireResult{}, false, fmt.Errorf("%w: token %q: %v", core.ErrBadReply, p, err)
		}
	}
	return core.AcquireResult{Tokens: tokens}, true, nil
}

func (s store) Release(ctx context.Context, id string, leases []driver.Lease, waitMS int64) (err error) {
	bs, err := s.b.boundFor(ctx, waitMS)
	if err != nil {
		return err
	}
	if n := s.b.notify; n != nil {
		if bound, ok := s.b.boundS(waitMS); ok && len(leases) == 1 {
			// On the hint connection: the routine gives the hint back
			// once the release has committed.
			err = n.onHintConn(ctx, bound, func(bs *boundStmts) error {
				_, err := bs.release.ExecContext(ctx, id, leases[0].Name, strconv.FormatUint(leases[0].Token, 10))
				return err
			})
			if err == nil {
				n.released(id, leases[0].Name)
			}
			return err
		}
		defer func() {
			if err == nil {
				for _, l := range leases {
					n.giveBack(ctx, id, l.Name)
				}
			}
		}()
	}
	if len(leases) == 1 { // the usual case: no builders
		if bs != nil {
			_, err = bs.release.ExecContext(ctx, id, leases[0].Name, strconv.FormatUint(leases[0].Token, 10))
		} else {
			_, err = s.b.stmts.release.ExecContext(ctx, id, leases[0].Name, strconv.FormatUint(leases[0].Token, 10), waitMS)
		}
		return err
	}
	var names, tokens strings.Builder
	leases = slices.Clone(leases)
	slices.SortFunc(leases, func(a, b driver.Lease) int {
		if c := bucket(a.Name) - bucket(b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i, l := range leases {
		if i > 0 {
			names.WriteByte(',')
			tokens.WriteByte(',')
		}
		names.WriteString(l.Name)
		tokens.WriteString(strconv.FormatUint(l.Token, 10))
	}
	if bs != nil {
		_, err = bs.release.ExecContext(ctx, id, names.String(), tokens.String())
	} else {
		_, err = s.b.stmts.release.ExecContext(ctx, id, names.String(), tokens.String(), waitMS)
	}
	return err
}

func (s store) Close(ctx context.Context, id string, waitMS int64) error {
	_, err := s.b.stmts.closeID.ExecContext(ctx, id, waitMS)
	if n := s.b.notify; n != nil && err == nil {
		n.forget(ctx, id) // the session's hints, once its leases are free
	}
	return err
}

// joinNames is the names comma-separated, without a copy for one name.
func joinNames(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names, ",")
}

// deadlocked reports InnoDB's deadlock victim (ER_LOCK_DEADLOCK, 1213):
// its transaction was rolled back whole, so the call may run again.
func deadlocked(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// unknownVariable reports ER_UNKNOWN_SYSTEM_VARIABLE (1193): a variable
// this server does not have (MariaDB's max_statement_time on MySQL).
func unknownVariable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1193
}
