package pgsimba

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
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
const schemaVersion = 5

// Option configures [New] and [Connect].
type Option func(*config)

type config struct {
	prefix       string
	createSchema bool
	log          *slog.Logger
	listenWait   time.Duration
	maxLease     time.Duration
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

// WithoutSchemaCreation makes [New] assume the tables and routines exist
// (created from [Schema] by a migration tool) instead of creating them.
func WithoutSchemaCreation() Option { return func(c *config) { c.createSchema = false } }

// Backend is a [driver.Backend] and [driver.Broadcaster] on PostgreSQL.
// It is safe for concurrent use and may serve many sessions.
type Backend struct {
	core    core.Backend
	pool    *pgxpool.Pool
	ownPool bool
	prefix  string
	q       queries
	log     *slog.Logger
	// listenWait bounds Subscribe's wait for the listener.
	listenWait time.Duration

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
	if c.log == nil || c.listenWait <= 0 {
		return nil, fmt.Errorf("pgsimba: WithLogger(nil) or WithListenWait(%v): want a logger and a positive wait", c.listenWait)
	}
	q, err := newQueries(c.prefix)
	if err != nil {
		return nil, fmt.Errorf("pgsimba: %w", err)
	}
	b := &Backend{pool: pool, prefix: c.prefix, q: q, log: c.log, listenWait: c.listenWait, subs: map[int]*subscriber{}}
	b.core = core.Backend{Store: store{b}, Label: "pgsimba", Retryable: deadlocked, MaxLease: c.maxLease}
	if c.createSchema {
		if err := b.createSchema(ctx); err != nil {
			return nil, err
		}
	} else {
		// Checked at the first call: New does not touch the database.
		b.core.Ready = b.checkSchema
	}
	return b, nil
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
func Migration(prefix string, from int) (string, error) {
	if from < 0 || from > schemaVersion {
		return "", fmt.Errorf("pgsimba: no migration from schema version %d (this code has version %d)", from, schemaVersion)
	}
	var sql strings.Builder
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
	return core.Expand(sql.String(), prefix)
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
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
			return err
		}
		in, err := b.installed(ctx, tx)
		if err != nil || in.Version >= schemaVersion {
			return err
		}
		ddl, err := Migration(b.prefix, in.Version)
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

// checkSchema refuses a namespace whose installed schema this code cannot
// use, naming both versions and the migration.
func (b *Backend) checkSchema(ctx context.Context) error {
	in, err := b.installed(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("pgsimba: read schema version of %q: %w", b.prefix, err)
	}
	return core.CheckSchema("pgsimba", b.prefix, in, "pgsimba.Migration", schemaVersion)
}

// installed reads the namespace's schema version: from <p>_schema, or 1
// if only the first schema's tables exist, or 0 if nothing does.
func (b *Backend) installed(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (core.Installed, error) {
	var in core.Installed
	var hasSchema, hasSessions bool
	err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		b.prefix+"_schema", b.prefix+"_sessions").Scan(&hasSchema, &hasSessions)
	switch {
	case err != nil:
		return in, err
	case hasSchema:
		err = q.QueryRow(ctx, b.q.version).Scan(&in.Version, &in.CompatibleFrom)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: table %s_schema is empty", core.ErrBadReply, b.prefix)
		}
		return in, err
	case hasSessions:
		return core.Installed{Version: 1, CompatibleFrom: 1}, nil
	}
	return in, nil
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
	open, renew, acquire, epoch, release, close, channel string
	version, inspectNames, inspectPrefix                 string
}

// inspectSQL lists live holders; the WHERE clause is appended. One clock
// reading serves the whole statement.
const inspectSQL = `WITH n AS (SELECT clock_timestamp() AS t)
SELECT l.name, l.token, l.session_id, coalesce(s.owner, ''),
       greatest(1, (extract(epoch FROM s.expires_at - n.t) * 1000000)::bigint)
  FROM n, {p}_leases l JOIN {p}_sessions s ON s.id = l.session_id
 WHERE l.held AND s.expires_at > n.t AND `

func newQueries(prefix string) (queries, error) {
	var q queries
	var err error
	for _, s := range []struct {
		dst  *string
		text string
	}{
		{&q.open, "SELECT {p}_open_v4($1, $2, $3, $4)"},
		{&q.version, "SELECT version, compatible_from FROM {p}_schema WHERE id = 1"},
		{&q.inspectNames, inspectSQL + "l.name = ANY($1)"},
		// A literal prefix: no LIKE, whose _ would be a wildcard.
		{&q.inspectPrefix, inspectSQL + "left(l.name, length($1)) = $1"},
		{&q.renew, "SELECT r_remaining_us, r_version, r_name, r_token FROM {p}_renew_v3($1, $2, $3)"},
		{&q.acquire, "SELECT {p}_acquire_v4($1, $2, $3, $4)"},
		{&q.epoch, "SELECT {p}_epoch_v2($1, $2)"},
		{&q.release, "SELECT {p}_release_v3($1, $2, $3, $4)"},
		{&q.close, "SELECT {p}_close_v3($1, $2)"},
		{&q.channel, `LISTEN "{p}_released"`},
	} {
		if *s.dst, err = core.Expand(s.text, prefix); err != nil {
			return queries{}, err
		}
	}
	return q, nil
}

// store is the PostgreSQL [core.Store]: one routine call per method.
type store struct{ b *Backend }

func (s store) Open(ctx context.Context, id string, leaseUS int64, owner string, waitMS int64) (int64, error) {
	var rem int64
	err := s.b.pool.QueryRow(ctx, s.b.q.open, id, leaseUS, owner, waitMS).Scan(&rem)
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
	rows, err := s.b.pool.Query(ctx, s.b.q.renew, id, int64(known), waitMS)
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

func (s store) Acquire(ctx context.Context, id string, names []string, quarantineUS, waitMS int64) (core.AcquireResult, bool, error) {
	for attempt := 1; ; attempt++ {
		tokens, err := s.acquireOnce(ctx, id, names, quarantineUS, waitMS)
		switch code := sqlstate(err); {
		case code == sqlstateExpired:
			return core.AcquireResult{}, false, nil
		case code != sqlstateLost: // nil among them
			return core.AcquireResult{Tokens: tokens}, err == nil, err
		}
		// The namespace's records were lost, or it is quarantined:
		// acquire_v4 rolled everything back.
		// epoch_v2 (epoch_v1's body, its commit flushed: ADR 0160) notes
		// the loss and says how long the quarantine has left (ADR 0135).
		var left int64
		if err := s.b.pool.QueryRow(ctx, s.b.q.epoch, quarantineUS, waitMS).Scan(&left); err != nil {
			return core.AcquireResult{}, false, err
		}
		if left > 0 {
			return core.AcquireResult{QuarantineUS: left}, true, nil
		}
		if attempt == 3 { // the quarantine ended, yet acquire still finds it
			return core.AcquireResult{}, false, fmt.Errorf("%w: acquire_v4 reports a lost or quarantined namespace that epoch_v2 does not", core.ErrBadReply)
		}
	}
}

func (s store) acquireOnce(ctx context.Context, id string, names []string, quarantineUS, waitMS int64) ([]uint64, error) {
	// One row, the tokens in the order of names (ADR 0162): a
	// one-dimensional array of one non-NULL, non-negative token per name
	// (0: held by a live session). Anything else is a routine changed by
	// hand, and grants nothing.
	var got pgtype.Array[pgtype.Int8]
	if err := s.b.pool.QueryRow(ctx, s.b.q.acquire, id, names, quarantineUS, waitMS).Scan(&got); err != nil {
		return nil, err
	}
	if !got.Valid || len(got.Dims) != 1 || got.Dims[0].LowerBound != 1 || int(got.Dims[0].Length) != len(names) || len(got.Elements) != len(names) {
		return nil, fmt.Errorf("%w: acquire_v4 answered %d tokens with dimensions %v for %d names, want a one-dimensional array of one per name", core.ErrBadReply, len(got.Elements), got.Dims, len(names))
	}
	tokens := make([]uint64, len(names))
	for i, t := range got.Elements {
		if !t.Valid {
			return nil, fmt.Errorf("%w: acquire_v4 answered NULL for %q, want a token ≥ 0", core.ErrBadReply, names[i])
		}
		if t.Int64 < 0 {
			return nil, fmt.Errorf("%w: acquire_v4 answered token %d for %q, want a token ≥ 0", core.ErrBadReply, t.Int64, names[i])
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
	return s.b.pool.QueryRow(ctx, s.b.q.release, id, names, tokens, waitMS).Scan(&n)
}

func (s store) Close(ctx context.Context, id string, waitMS int64) error {
	var n int32
	return s.b.pool.QueryRow(ctx, s.b.q.close, id, waitMS).Scan(&n)
}

// deadlocked reports a deadlock victim (SQLSTATE 40P01): its transaction
// was rolled back whole, so the call may run again.
func deadlocked(err error) bool { return sqlstate(err) == sqlstateDeadlock }
