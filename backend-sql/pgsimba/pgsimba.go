package pgsimba

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/core"
	"github.com/simba-go/simba/session/driver"
)

// schemaVersion is the version of the tables and routines this code calls
// (docs/adr/0081-sql-schema-versions.md; the versions are listed in
// internal/core/schema.go).
const schemaVersion = 7

// Option configures [New] and [Connect].
type Option func(*config)

type config struct {
	prefix       string
	schema       string // "" when WithSchema is not given
	createSchema bool
	existing     bool // OpenExisting
	log          *slog.Logger
	listenWait   time.Duration
	maxLease     time.Duration
	maxLockDelay time.Duration
}

// WithLogger sets the logger of the release listener, which warns when
// release notices are lost (candidates then poll). Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithListenWait bounds how long [Backend.Subscribe] waits for the
// listener's LISTEN to be in effect (default 5s).
func WithListenWait(d time.Duration) Option { return func(c *config) { c.listenWait = d } }

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
// release stays refused until the database's clock passes the session's
// expiry plus the delay its grant recorded (ADR 0251). It lengthens the
// quarantine after a data loss to WithMaxLease + WithMaxLockDelay: the
// delays are lost with the leases. Every process of a namespace must use
// the same maximum, as for WithMaxLease.
func WithMaxLockDelay(d time.Duration) Option { return func(c *config) { c.maxLockDelay = d } }

// WithoutSchemaCreation makes [New] assume the tables and routines exist
// (created from [Schema] by a migration tool) instead of creating them.
func WithoutSchemaCreation() Option { return func(c *config) { c.createSchema = false } }

// OpenExisting makes [New] open a namespace that exists, only reading: it
// creates and migrates nothing, and returns an error wrapping
// [sqlbackend.ErrUnknownNamespace], naming the namespace, when nothing of
// it is installed, or one wrapping [sqlbackend.ErrSchemaVersion] when its
// schema is one it cannot read (version 1, or a newer incompatible one);
// an older version that processes not yet upgraded run on is read as it
// is. It works on a read-only connection
// (a standby, default_transaction_read_only), for tools that only look:
// [Backend.Inspect] reads, while sessions, which write, fail there.
func OpenExisting() Option {
	return func(c *config) { c.createSchema, c.existing = false, true }
}

// WithSchema binds the namespace to a schema of the database (ADR 0170):
// its tables and routines are created there, and every call names it,
// whatever the pool's search_path. Without it the namespace is wherever its
// tables are in the database (found by the catalog, in one schema only),
// or, if it exists nowhere yet, is created in [DefaultSchema]. New refuses,
// with an error wrapping [sqlbackend.ErrSchemaConflict], a namespace whose
// tables are in more than one schema, or in another than WithSchema names:
// one prefix on one database is one namespace.
func WithSchema(schema string) Option { return func(c *config) { c.schema = schema } }

// Backend is a [driver.Backend] and [driver.Broadcaster] on PostgreSQL.
// It is safe for concurrent use and may serve many sessions.
type Backend struct {
	core    core.Backend
	pool    *pgxpool.Pool
	ownPool bool
	prefix  string
	// schema is WithSchema's ("" without it); q names the schema the
	// namespace was found in, set by New or before the first call.
	schema  string
	q       queries
	channel string // LISTEN statement; independent of the schema
	log     *slog.Logger
	// listenWait bounds Subscribe's wait for the listener.
	listenWait time.Duration
	// notRC is set once a call found the pool's transactions other than
	// READ COMMITTED (ADR 0171): calls then set it in a transaction.
	notRC atomic.Bool

	mu        sync.Mutex
	subs      map[int]*subscriber // nil after Shutdown
	next      int
	stop      func()        // stops the listener; nil when no subscriber
	listening chan struct{} // closed once the listener's LISTEN is in effect
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Broadcaster = (*Backend)(nil)
	_ driver.Inspector   = (*Backend)(nil)
)

// New returns a backend on the user's pool. Unless [WithoutSchemaCreation]
// is given it creates the namespace's tables and routines if they are
// missing, which is safe when many processes start at once. The pool stays
// the caller's: [Backend.Shutdown] does not close it.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("pgsimba: nil pool")
	}
	c := config{prefix: sqlbackend.DefaultPrefix, createSchema: true, log: slog.Default(), listenWait: 5 * time.Second, maxLease: core.DefaultMaxLease}
	for _, o := range opts {
		o(&c)
	}
	if err := core.CheckMaxLease("pgsimba", c.maxLease); err != nil {
		return nil, err
	}
	if err := core.CheckMaxLockDelay("pgsimba", c.maxLockDelay); err != nil {
		return nil, err
	}
	if c.log == nil || c.listenWait <= 0 {
		return nil, fmt.Errorf("pgsimba: WithLogger(nil) or WithListenWait(%v): want a logger and a positive wait", c.listenWait)
	}
	if err := sqlbackend.ValidatePrefix(c.prefix); err != nil {
		return nil, fmt.Errorf("pgsimba: %w", err)
	}
	if c.schema != "" {
		if err := checkSchemaName(c.schema); err != nil {
			return nil, err
		}
	}
	channel, err := core.Expand(`LISTEN "{p}_released"`, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("pgsimba: %w", err)
	}
	b := &Backend{pool: pool, prefix: c.prefix, schema: c.schema, channel: channel, log: c.log, listenWait: c.listenWait, subs: map[int]*subscriber{}}
	b.core = core.Backend{Store: store{b}, Label: "pgsimba", Retryable: retryable, MaxLease: c.maxLease, MaxLockDelay: c.maxLockDelay}
	switch {
	case c.createSchema:
		if err := b.createSchema(ctx); err != nil {
			return nil, err
		}
	case c.existing:
		if err := b.openExisting(ctx); err != nil {
			return nil, err
		}
	default:
		// Checked at the first call: New does not touch the database.
		b.core.Ready = b.checkSchema
	}
	return b, nil
}

// openExisting finds the namespace and checks its schema, only reading
// (OpenExisting).
func (b *Backend) openExisting(ctx context.Context) error {
	p, err := b.survey(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("pgsimba: open namespace %q: %w", b.prefix, err)
	}
	if p.in.Version == 0 {
		return fmt.Errorf("pgsimba: namespace %q: %w: no table of it in the database (looked in every schema; it would be created in %q); check the name, or start the application once to create it",
			b.prefix, sqlbackend.ErrUnknownNamespace, p.schema)
	}
	// Only reading: any version whose tables Inspect reads, older ones
	// too (a rolling upgrade), never a migration.
	if err := core.CheckReadable("pgsimba", b.prefix, p.in, schemaVersion); err != nil {
		return err
	}
	b.warnOthers(p)
	return b.bind(p.schema)
}

// checkVersion is core.CheckSchema, naming MigrationIn for a namespace
// outside DefaultSchema (Migration's script works in DefaultSchema only).
func checkVersion(prefix string, p place) error {
	err := core.CheckSchema("pgsimba", prefix, p.in, "pgsimba.Migration", schemaVersion)
	if err != nil && p.schema != DefaultSchema {
		return fmt.Errorf("%w (the namespace is in schema %q: take the script from pgsimba.MigrationIn(%q, %q, %d))", err, p.schema, p.schema, prefix, p.in.Version)
	}
	return err
}

// bind builds the calls' statements, every name qualified with the
// namespace's schema.
func (b *Backend) bind(schema string) error {
	q, err := newQueries(schema, b.prefix)
	if err != nil {
		return fmt.Errorf("pgsimba: %w", err)
	}
	b.q = q
	return nil
}

// writable refuses a read-only connection (default_transaction_read_only,
// a hot standby): every call of a session writes, so each would fail.
func writable(ctx context.Context, q rowQuerier) error {
	var ro string
	if err := q.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_read_only')").Scan(&ro); err != nil {
		return err
	}
	if ro == "on" {
		return fmt.Errorf("%w: the pool's transactions are read-only (default_transaction_read_only on, or a hot standby), and every call of a session writes; connect to the primary with a role whose transactions may write (OpenExisting only reads)", sqlbackend.ErrReadOnly)
	}
	return nil
}

// Connect opens a pool from a pgx connection string and returns a backend
// on it, as [New]. [Backend.Shutdown] closes that pool.
func Connect(ctx context.Context, connString string, opts ...Option) (*Backend, error) {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("pgsimba: connect: %w", err)
	}
	b, err := New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	return b, nil
}

// Schema returns the SQL that creates the tables and routines of the
// namespace named by prefix at the current schema version, for users who
// run migrations themselves (see [WithoutSchemaCreation]). Run it as one
// script, in a transaction.
func Schema(prefix string) (string, error) { return Migration(prefix, 0) }

// SchemaIn is [Schema] for a namespace in the given schema ([WithSchema]).
func SchemaIn(schema, prefix string) (string, error) { return MigrationIn(schema, prefix, 0) }

// Migration returns the SQL that brings the namespace named by prefix from
// schema version from (0: nothing installed; 1: the first releases, which
// recorded no version) to the version this code needs. Run it as one
// script, in a transaction. Processes still running the older code keep
// working on the upgraded schema; the backend refuses to start on an older
// one, naming this function.
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
//
// The script creates and changes objects in [DefaultSchema] only, whatever
// the search_path of the connection that runs it: [MigrationIn] for
// another schema.
func Migration(prefix string, from int) (string, error) {
	return MigrationIn(DefaultSchema, prefix, from)
}

// MigrationIn is [Migration] for a namespace in the given schema
// ([WithSchema]). Its first statement sets the search_path for the rest of
// its transaction only: run it in one transaction.
func MigrationIn(schemaName, prefix string, from int) (string, error) {
	if err := checkSchemaName(schemaName); err != nil {
		return "", err
	}
	if from < 0 || from > schemaVersion {
		return "", fmt.Errorf("pgsimba: no migration from schema version %d (this code has version %d)", from, schemaVersion)
	}
	var sql strings.Builder
	// Every name the script creates, alters or calls is then in schema
	// (pg_temp last: a temporary table never shadows one of them).
	fmt.Fprintf(&sql, "SELECT pg_catalog.set_config('search_path', '%s, pg_temp', true);\n", quoteIdent(schemaName))
	create := from == 0
	if create {
		sql.WriteString(schema)
		from = 1
	}
	for v := from; v < schemaVersion; v++ {
		sql.WriteString(migrations[v])
	}
	if create {
		sql.WriteString(initEpoch)
	}
	return core.Expand(strings.ReplaceAll(sql.String(), "{s}", schemaName), prefix)
}

// Channel returns the LISTEN/NOTIFY channel on which releases in the
// namespace named by prefix are announced; the payload is the lease name.
func Channel(prefix string) (string, error) { return core.Expand("{p}_released", prefix) }

// schemaLockWait bounds each lock wait of a schema migration's DDL. An
// ALTER TABLE queued behind a long reader of the table (a report, a dump,
// a client idle in a transaction) would otherwise hold every later lease
// call of the namespace, from old and new processes, queued behind it
// (ADR 0162); it gives up after this long and is tried again.
const schemaLockWait = 200 * time.Millisecond

func (b *Backend) createSchema(ctx context.Context) error {
	h := fnv.New64a()
	h.Write([]byte("simba-schema:" + b.prefix))
	key := int64(h.Sum64())
	backoff := schemaLockWait
	for {
		err := b.migrateOnce(ctx, key)
		if err == nil {
			return b.checkSchema(ctx)
		}
		if sqlstate(err) != sqlstateLockNotAvailable {
			return fmt.Errorf("pgsimba: create schema %q: %w", b.prefix, err)
		}
		b.log.Info("pgsimba: schema migration waits for a lock on the namespace's tables; trying again", "namespace", b.prefix, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgsimba: create schema %q: a lock on the namespace's tables stayed taken: %w (last: %w)", b.prefix, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (b *Backend) migrateOnce(ctx context.Context, key int64) error {
	// READ COMMITTED whatever the pool's default (ADR 0171): each
	// statement after the lock sees what a creator before it committed.
	return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		// No statement_timeout for this transaction (ADR 0285): a
		// migration's work grows with the namespace (version 7 folds and
		// deletes every released row), and so does another creator's wait
		// for the lock below; the pool's bound against runaway queries
		// would fail it at every start. Its lock waits on the tables stay
		// bounded (schemaLockWait), the whole by ctx.
		// (A statement of its own: a statement runs under the timeout
		// in force when it starts.)
		if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', '0', true)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", key); err != nil {
			return err
		}
		if err := writable(ctx, tx); err != nil {
			return err
		}
		// Everything is checked before anything is created or changed
		// (ADR 0172), under the lock, so two creators agree on the place.
		p, err := b.survey(ctx, tx)
		if err != nil || p.in.Version >= schemaVersion {
			return err
		}
		var exists, may bool
		var current *string
		if err := tx.QueryRow(ctx, `SELECT s IS NOT NULL, s IS NOT NULL AND pg_catalog.has_schema_privilege(s, 'CREATE'), pg_catalog.current_schema()
  FROM (SELECT pg_catalog.to_regnamespace($1)::oid AS s) n`, quoteIdent(p.schema)).Scan(&exists, &may, &current); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("schema %q, where the namespace is to be created, does not exist: create it, or name another with WithSchema (ADR 0170)", p.schema)
		}
		if p.in.Version == 0 && !may {
			// PostgreSQL 15 and later let only the database owner create
			// in public; releases before schema version 6 created in the
			// first schema of the pool's search_path.
			return fmt.Errorf("the role may not create the namespace in schema %q, where it is to be created (no CREATE privilege on it; from PostgreSQL 15 only the database's owner has it on public): name a schema the role may create in with WithSchema (the pool's current schema is %s), grant CREATE on %q, or have a role that may run pgsimba.SchemaIn and start with WithoutSchemaCreation (ADR 0170)",
				p.schema, quoteOrNone(current), p.schema)
		}
		ddl, err := MigrationIn(p.schema, b.prefix, p.in.Version)
		if err != nil {
			return err
		}
		// For this transaction only, in one statement: the DDL's lock
		// waits are bounded (schemaLockWait), and the tables commit with
		// a WAL flush, as the routines' writes do (ADR 0160: a crash right
		// after New would otherwise lose them).
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), "+
			"CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END",
			fmt.Sprintf("%dms", schemaLockWait.Milliseconds())); err != nil {
			return err
		}
		// No arguments: pgx sends it with the simple protocol, which
		// accepts several statements.
		_, err = tx.Exec(ctx, ddl)
		return err
	})
}

// warnOthers says, once per New, that WithSchema chose among several
// schemas holding the prefix (ADR 0219): tenants' namespaces, or a split
// left by processes of an older release whose search_path resolved to
// another schema, which this namespace does not exclude.
func (b *Backend) warnOthers(p place) {
	if len(p.others) > 0 {
		b.log.Warn("pgsimba: the namespace's prefix has tables in other schemas too: namespaces of their own (one per tenant?); processes of this application that use one of them (an older release's search_path) are not excluded from this one (ADR 0219)",
			"namespace", b.prefix, "schema", p.schema, "others", strings.Join(p.others, ", "))
	}
}

// quoteOrNone is s quoted, or "none" for NULL (current_schema() when no
// schema of the search_path exists).
func quoteOrNone(s *string) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%q", *s)
}

// checkSchema finds the namespace and refuses one whose installed schema
// this code cannot use, naming both versions and the migration; it binds
// the calls to the namespace's schema.
func (b *Backend) checkSchema(ctx context.Context) error {
	if err := writable(ctx, b.pool); err != nil {
		return fmt.Errorf("pgsimba: namespace %q: %w", b.prefix, err)
	}
	p, err := b.survey(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("pgsimba: read schema version of %q: %w", b.prefix, err)
	}
	if err := checkVersion(b.prefix, p); err != nil {
		return err
	}
	b.warnOthers(p)
	return b.bind(p.schema)
}

// Shutdown stops the LISTEN connection, if any, and closes the pool if
// [Connect] opened it. Sessions are not closed: close them first (the
// engine does on its Close). Later calls fail with an error wrapping
// driver.ErrClosed. ctx bounds nothing today (stopping the LISTEN
// connection does not wait on the network); it is there because every
// backend package's Shutdown has this shape (ADR 0061).
func (b *Backend) Shutdown(ctx context.Context) error {
	b.core.Shut()
	b.mu.Lock()
	stop := b.stop
	b.stop = nil
	b.subs = nil // Subscribe refuses from now on
	b.mu.Unlock()
	if stop != nil {
		stop()
	}
	if b.ownPool {
		b.pool.Close()
	}
	return nil
}

// Open implements [driver.Backend]: a new session with a random 128-bit
// id, expiring the requested lease duration after now by the database
// clock.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	return b.core.Open(ctx, req)
}

// Renew implements [driver.Backend] in one statement, whatever the number
// of leases; the owned leases are listed only when their version changed.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	return b.core.Renew(ctx, req)
}

// Acquire implements [driver.Backend] in one statement for the whole
// batch.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	return b.core.Acquire(ctx, req)
}

// Release implements [driver.Backend] in one statement, which also
// announces on [Channel], in the same transaction, each freed name that an
// acquire was refused (ADR 0162).
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	return b.core.Release(ctx, req)
}

// Close implements [driver.Backend]: it deletes the session and frees
// every lease it owned, announcing those an acquire was refused.
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	return b.core.Close(ctx, id)
}

type queries struct {
	open, renew, acquire, epoch, release, close string
	inspectNames, inspectPrefix                 string
	// The scalar calls again, each run only in a READ COMMITTED
	// transaction (see rcGuard).
	openRC, acquireRC, epochRC, releaseRC, closeRC string
}

// rcGuard wraps a scalar routine call, "SELECT f(...)", so that the
// routine runs only if the statement's transaction is READ COMMITTED, the
// isolation the routines are written for (ADR 0171): the first column says
// whether it is, the second is the routine's answer, or zero (none of the
// routine ran) when it is not. A CASE never evaluates a branch not taken,
// and the routines are volatile, so never folded in advance.
func rcGuard(call, zero string) string {
	return "SELECT c.rc, CASE WHEN c.rc THEN " + strings.TrimPrefix(call, "SELECT ") + " ELSE " + zero +
		" END FROM (SELECT pg_catalog.current_setting('transaction_isolation') = 'read committed' AS rc) c"
}

// inspectSQL lists live holders; the WHERE clause is appended. One clock
// reading serves the whole statement.
const inspectSQL = `WITH n AS (SELECT clock_timestamp() AS t)
SELECT l.name, l.token, l.session_id, coalesce(s.owner, ''),
       greatest(1, (extract(epoch FROM s.expires_at - n.t) * 1000000)::bigint)
  FROM n, {p}_leases l JOIN {p}_sessions s ON s.id = l.session_id
 WHERE l.held AND s.expires_at > n.t AND `

// newQueries builds the calls of the namespace prefix in schema, every
// table and routine named with its schema (ADR 0170).
func newQueries(schema, prefix string) (queries, error) {
	var q queries
	var err error
	for _, s := range []struct {
		dst  *string
		text string
	}{
		{&q.open, "SELECT {p}_open_v5($1, $2, $3, $4)"},
		{&q.inspectNames, inspectSQL + "l.name = ANY($1)"},
		// A literal prefix: no LIKE, whose _ would be a wildcard.
		{&q.inspectPrefix, inspectSQL + "left(l.name, length($1)) = $1"},
		{&q.renew, "SELECT r_remaining_us, r_version, r_name, r_token FROM {p}_renew_v3($1, $2, $3)"},
		{&q.acquire, "SELECT {p}_acquire_v5($1, $2, $3, $4, $5)"},
		{&q.epoch, "SELECT {p}_epoch_v3($1, $2)"},
		{&q.release, "SELECT {p}_release_v4($1, $2, $3, $4)"},
		{&q.close, "SELECT {p}_close_v4($1, $2)"},
	} {
		if *s.dst, err = core.Expand(strings.ReplaceAll(s.text, "{p}_", quoteIdent(schema)+".{p}_"), prefix); err != nil {
			return queries{}, err
		}
	}
	q.openRC, q.acquireRC, q.epochRC = rcGuard(q.open, "0"), rcGuard(q.acquire, "'{}'"), rcGuard(q.epoch, "0")
	q.releaseRC, q.closeRC = rcGuard(q.release, "0"), rcGuard(q.close, "0")
	return q, nil
}

// scalar runs a scalar routine call (plain, and guarded by rcGuard) and
// scans its answer into dest, in a READ COMMITTED transaction whatever the
// pool's default isolation (ADR 0171): in one round trip while the pool's
// transactions are READ COMMITTED, else, from the first call that finds
// them not, in an explicit transaction (three round trips) that sets it.
func (b *Backend) scalar(ctx context.Context, plain, guarded string, dest any, args ...any) error {
	if !b.notRC.Load() {
		var rc bool
		if err := b.pool.QueryRow(ctx, guarded, args...).Scan(&rc, dest); err != nil || rc {
			return err
		}
		if !b.notRC.Swap(true) {
			b.log.Info("pgsimba: the pool's default isolation is not READ COMMITTED; each call now runs in a transaction that sets it (three round trips instead of one)", "namespace", b.prefix)
		}
	}
	return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, plain, args...).Scan(dest)
	})
}

// store is the PostgreSQL [core.Store]: one routine call per method.
type store struct{ b *Backend }

func (s store) Open(ctx context.Context, id string, leaseUS int64, owner string, waitMS int64) (int64, error) {
	var rem int64
	err := s.b.scalar(ctx, s.b.q.open, s.b.q.openRC, &rem, id, leaseUS, owner, waitMS)
	return rem, err
}

func (s store) Inspect(ctx context.Context, names []string, prefix string) ([]core.HolderRow, error) {
	q, arg := s.b.q.inspectPrefix, any(prefix)
	if names != nil {
		q, arg = s.b.q.inspectNames, names
	}
	rows, err := s.b.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.HolderRow, error) {
		var h core.HolderRow
		err := r.Scan(&h.Name, &h.Token, &h.Session, &h.Owner, &h.RemainingUS)
		return h, err
	})
}

// Inspect implements [driver.Inspector] with one query: the held leases
// of the names, or of the names starting with the prefix (compared
// literally), whose session has not expired by the database clock.
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	return b.core.Inspect(ctx, req)
}

func (s store) Renew(ctx context.Context, id string, known uint64, waitMS int64) (core.RenewResult, bool, error) {
	if !s.b.notRC.Load() {
		// A set-returning routine, which no CASE can guard: on a pool
		// not yet found other than READ COMMITTED (an open found it
		// first, as every session's first call), it runs at the pool's
		// isolation, where it is correct too, and a serialization
		// failure is retried (ADR 0171).
		return s.renew(ctx, s.b.pool, id, known, waitMS)
	}
	var r core.RenewResult
	var header bool
	err := pgx.BeginTxFunc(ctx, s.b.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) (err error) {
		r, header, err = s.renew(ctx, tx, id, known, waitMS)
		return err
	})
	return r, header, err
}

func (s store) renew(ctx context.Context, q rowQuerier, id string, known uint64, waitMS int64) (core.RenewResult, bool, error) {
	rows, err := q.Query(ctx, s.b.q.renew, id, int64(known), waitMS)
	if err != nil {
		return core.RenewResult{}, false, err
	}
	defer rows.Close()
	var r core.RenewResult
	header := false
	for rows.Next() {
		var rem, ver, token *int64
		var name *string
		if err := rows.Scan(&rem, &ver, &name, &token); err != nil {
			return core.RenewResult{}, false, err
		}
		switch {
		case name == nil && rem != nil && ver != nil:
			header = true
			r.RemainingUS, r.Version = *rem, uint64(*ver)
		case name != nil && token != nil:
			r.Leases = append(r.Leases, driver.Lease{Name: *name, Token: uint64(*token)})
		default:
			return core.RenewResult{}, false, core.ErrBadReply
		}
	}
	if err := rows.Err(); err != nil {
		return core.RenewResult{}, false, err
	}
	return r, header, nil
}

func (s store) Acquire(ctx context.Context, id string, names []string, quarantineUS, waitMS, delayUS int64) (core.AcquireResult, bool, error) {
	for attempt := 1; ; attempt++ {
		tokens, err := s.acquireOnce(ctx, id, names, quarantineUS, waitMS, delayUS)
		switch code := sqlstate(err); {
		case code == sqlstateExpired:
			return core.AcquireResult{}, false, nil
		case code != sqlstateLost: // nil among them
			return core.AcquireResult{Tokens: tokens}, err == nil, err
		}
		// The namespace's records were lost, or it is quarantined:
		// acquire_v5 rolled everything back.
		// epoch_v3 (epoch_v1's body and the marks, its commit flushed: ADR
		// 0160, 0250) notes the loss and says how long the quarantine has left (ADR 0135).
		var left int64
		if err := s.b.scalar(ctx, s.b.q.epoch, s.b.q.epochRC, &left, quarantineUS, waitMS); err != nil {
			return core.AcquireResult{}, false, err
		}
		if left > 0 {
			return core.AcquireResult{QuarantineUS: left}, true, nil
		}
		if attempt == 3 { // the quarantine ended, yet acquire still finds it
			return core.AcquireResult{}, false, fmt.Errorf("%w: acquire_v5 reports a lost or quarantined namespace that epoch_v3 does not", core.ErrBadReply)
		}
	}
}

func (s store) acquireOnce(ctx context.Context, id string, names []string, quarantineUS, waitMS, delayUS int64) ([]uint64, error) {
	// One row, the tokens in the order of names (ADR 0162): a
	// one-dimensional array of one non-NULL, non-negative token per name
	// (0: held by a live session). Anything else is a routine changed by
	// hand, and grants nothing.
	var got pgtype.Array[pgtype.Int8]
	if err := s.b.scalar(ctx, s.b.q.acquire, s.b.q.acquireRC, &got, id, names, quarantineUS, waitMS, delayUS); err != nil {
		return nil, err
	}
	if !got.Valid || len(got.Dims) != 1 || got.Dims[0].LowerBound != 1 || int(got.Dims[0].Length) != len(names) || len(got.Elements) != len(names) {
		return nil, fmt.Errorf("%w: acquire_v5 answered %d tokens with dimensions %v for %d names, want a one-dimensional array of one per name", core.ErrBadReply, len(got.Elements), got.Dims, len(names))
	}
	tokens := make([]uint64, len(names))
	for i, t := range got.Elements {
		if !t.Valid {
			return nil, fmt.Errorf("%w: acquire_v5 answered NULL for %q, want a token ≥ 0", core.ErrBadReply, names[i])
		}
		if t.Int64 < 0 {
			return nil, fmt.Errorf("%w: acquire_v5 answered token %d for %q, want a token ≥ 0", core.ErrBadReply, t.Int64, names[i])
		}
		tokens[i] = uint64(t.Int64)
	}
	return tokens, nil
}

// sqlstateExpired is raised by the acquire routine for an expired or
// unknown session, sqlstateLost for a namespace whose records were lost
// or that is quarantined (in both cases after rolling back what it did);
// the others are PostgreSQL's: a deadlock victim, a lock wait past
// lock_timeout.
const (
	sqlstateExpired          = "SX001"
	sqlstateLost             = "SX002"
	sqlstateDeadlock         = "40P01"
	sqlstateSerialization    = "40001"
	sqlstateIdleSession      = "57P05"
	sqlstateLockNotAvailable = "55P03"
)

// sqlstate is the SQLSTATE of the server's error in err's chain, or "".
func sqlstate(err error) string {
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func (s store) Release(ctx context.Context, id string, leases []driver.Lease, waitMS int64) error {
	names := make([]string, len(leases))
	tokens := make([]int64, len(leases))
	for i, l := range leases {
		names[i], tokens[i] = l.Name, int64(l.Token)
	}
	var n int32
	return s.b.scalar(ctx, s.b.q.release, s.b.q.releaseRC, &n, id, names, tokens, waitMS)
}

func (s store) Close(ctx context.Context, id string, waitMS int64) error {
	var n int32
	return s.b.scalar(ctx, s.b.q.close, s.b.q.closeRC, &n, id, waitMS)
}

// retryable reports a deadlock victim (SQLSTATE 40P01) or a serialization
// failure (40001, under a pool whose default isolation is repeatable read
// or serializable: ADR 0171): its transaction was rolled back whole, so the
// call may run again; and a connection the server ended while it was idle
// (57P05, idle_session_timeout), which the call found when it sent its
// statement: the statement never ran.
func retryable(err error) bool {
	switch sqlstate(err) {
	case sqlstateDeadlock, sqlstateSerialization, sqlstateIdleSession:
		return true
	}
	return false
}
