package pgsimba_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

// The deployment matrix (issue 21, docs/deployment/sql.md): the settings
// of a user's pool or role that Simba must either work under, keeping
// exclusion, or refuse at start with a clear error. Each setting is given
// to the pool's connections (RuntimeParams), never to the shared server.

// poolWith returns a pool whose connections run with the settings given.
func poolWith(t testing.TB, params map[string]string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// freshSchema creates a schema of its own for the test, dropped (with
// whatever is in it) when the test ends.
func freshSchema(t testing.TB, admin *pgxpool.Pool) string {
	t.Helper()
	s := "s_" + sqltest.FreshPrefix()
	if _, err := admin.Exec(ctxT(t), "CREATE SCHEMA "+s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+s+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", s, err)
		}
	})
	return s
}

// objectsIn counts the namespace's tables and routines in each schema.
func objectsIn(t testing.TB, admin *pgxpool.Pool, prefix string) map[string]int {
	t.Helper()
	rows, err := admin.Query(ctxT(t), `SELECT n.nspname, count(*) FROM (
    SELECT relnamespace AS ns FROM pg_class WHERE relname LIKE $1 || '\_%' AND relkind = 'r'
    UNION ALL SELECT pronamespace FROM pg_proc WHERE proname LIKE $1 || '\_%') o
  JOIN pg_namespace n ON n.oid = o.ns GROUP BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exclusive opens a session on each backend and has each acquire name:
// exactly one may be granted.
func exclusive(t *testing.T, a, b driver.Backend, name string) {
	t.Helper()
	ta := acquire(t, a, open(t, a, 10*time.Second), name)
	tb := acquire(t, b, open(t, b, 10*time.Second), name)
	if (ta == 0) == (tb == 0) {
		t.Fatalf("tokens %d and %d for %q through two pools: want exactly one grant (one prefix on one database is one namespace)", ta, tb, name)
	}
}

// TestSearchPathOneNamespace is issue 21.6: a pool whose search_path
// leaves out the schema holding the namespace's tables made a second
// namespace of the same prefix, and two leaders. One prefix on one
// database is one namespace whatever the pool's search_path (ADR 0170).
func TestSearchPathOneNamespace(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	other := freshSchema(t, admin)
	prefix := sqltest.FreshPrefix()
	a := newBackend(t, admin, prefix) // search_path "$user", public
	b, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"search_path": other}, 0), pgsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatalf("New through a pool whose search_path is %s: %v", other, err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	exclusive(t, a, b, "x")
	if got := objectsIn(t, admin, prefix); got[other] != 0 || got["public"] != 30 {
		t.Errorf("the namespace's objects by schema: %v, want its 5 tables and 25 routines in public only", got)
	}
}

// TestSearchPathExistingSchema is the upgrade path of ADR 0170: a
// namespace that an earlier release created in a non-public schema (by
// its pool's search_path) is found there through a pool whose
// search_path leaves it out, never created again; WithSchema naming
// another schema is refused, naming both.
func TestSearchPathExistingSchema(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	app := freshSchema(t, admin)
	prefix := sqltest.FreshPrefix()
	// As the release before this one did: created through a pool whose
	// search_path starts with app.
	old, err := pgsimba.SchemaAt(prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "BEGIN; SET LOCAL search_path = "+app+"; "+old+"; INSERT INTO "+app+"."+prefix+"_epoch VALUES (1, clock_timestamp()); COMMIT"); err != nil {
		t.Fatal(err)
	}
	a, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"search_path": app}, 0), pgsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	b, err := pgsimba.New(ctxT(t), admin, pgsimba.WithNamespace(prefix)) // search_path "$user", public
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	exclusive(t, a, b, "x")
	if got := objectsIn(t, admin, prefix); got["public"] != 0 || got[app] != 30 {
		t.Errorf("objects by schema: %v, want 30 in %s only", got, app)
	}
	_, err = pgsimba.New(ctxT(t), admin, pgsimba.WithNamespace(prefix), pgsimba.WithSchema("public"))
	if !errors.Is(err, sqlbackend.ErrSchemaConflict) || !strings.Contains(err.Error(), app) {
		t.Errorf("New(WithSchema(public)) with the namespace in %s = %v, want ErrSchemaConflict naming %s", app, err, app)
	}
}

// TestSearchPathSplitRefused: a namespace already split by an earlier
// release (tables of one prefix in two schemas) is refused, naming both,
// and nothing is created or changed.
func TestSearchPathSplitRefused(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	other := freshSchema(t, admin)
	prefix := sqltest.FreshPrefix()
	newBackend(t, admin, prefix)
	old, err := pgsimba.SchemaAt(prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "BEGIN; SET LOCAL search_path = "+other+"; "+old+"; COMMIT"); err != nil {
		t.Fatal(err)
	}
	before := objectsIn(t, admin, prefix)
	for _, p := range []*pgxpool.Pool{admin, poolWith(t, map[string]string{"search_path": other}, 0)} {
		_, err := pgsimba.New(ctxT(t), p, pgsimba.WithNamespace(prefix))
		if !errors.Is(err, sqlbackend.ErrSchemaConflict) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "public") {
			t.Errorf("New on a split namespace = %v, want ErrSchemaConflict naming both schemas", err)
		}
	}
	if got := objectsIn(t, admin, prefix); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("objects by schema %v after the refusals, %v before", got, before)
	}
}

// TestSchemaNamesQuoted: schema names that need quoting (capitals, a dash,
// a space and a dot, non-ASCII letters) work for creation, the version 6
// migration's routine settings and every call, also for a role with
// standard_conforming_strings off.
func TestSchemaNamesQuoted(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	for _, base := range []string{"App", "my-app", "a b.c", "схема"} {
		s := base + "_" + sqltest.FreshPrefix()
		if _, err := admin.Exec(ctxT(t), `CREATE SCHEMA "`+s+`"`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA "`+s+`" CASCADE`) })
		prefix := sqltest.FreshPrefix()
		var toks []uint64
		for _, params := range []map[string]string{{"standard_conforming_strings": "off"}, nil} {
			b, err := pgsimba.New(ctxT(t), poolWith(t, params, 0), pgsimba.WithNamespace(prefix), pgsimba.WithSchema(s))
			if err != nil {
				t.Fatalf("schema %q (%v): New: %v", s, params, err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			toks = append(toks, acquire(t, b, open(t, b, 10*time.Second), "x"))
		}
		if got := objectsIn(t, admin, prefix); got[s] != 30 || len(got) != 1 || (toks[0] == 0) == (toks[1] == 0) {
			t.Errorf("schema %q: objects %v, tokens %v; want 30 objects in it only and one grant", s, got, toks)
		}
	}
}

// TestSchemaPerTenant: tenants of one database, each a role whose
// search_path ("$user", public) led releases before schema version 6 to
// create the same prefix in the role's own schema, are namespaces of
// their own. Each starts with WithSchema naming its schema, which is
// upgraded alone; without WithSchema the split is refused, saying so. On
// the first version of ADR 0170 both were refused, WithSchema or not: no
// tenant could start after the upgrade.
func TestSchemaPerTenant(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	tenants := []string{freshSchema(t, admin), freshSchema(t, admin)}
	prefix := sqltest.FreshPrefix()
	old, err := pgsimba.SchemaAt(prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tenants {
		if _, err := admin.Exec(ctxT(t), "BEGIN; SET LOCAL search_path = "+s+"; "+old+"; INSERT INTO "+s+"."+prefix+"_epoch VALUES (1, clock_timestamp()); COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	_, err = pgsimba.New(ctxT(t), poolWith(t, map[string]string{"search_path": tenants[0]}, 0), pgsimba.WithNamespace(prefix))
	if !errors.Is(err, sqlbackend.ErrSchemaConflict) || !strings.Contains(err.Error(), "WithSchema") {
		t.Errorf("New without WithSchema on tenants' namespaces = %v, want ErrSchemaConflict naming WithSchema", err)
	}
	var toks []uint64
	for i, s := range tenants {
		var rec records
		b, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"search_path": s}, 0), pgsimba.WithNamespace(prefix), pgsimba.WithSchema(s), pgsimba.WithLogger(slog.New(&rec)))
		if err != nil {
			t.Fatalf("tenant %s: New(WithSchema(%s)): %v", s, s, err)
		}
		// Said, since it may be a split an older release left with live
		// processes, which this namespace does not exclude.
		if !rec.has("WARN pgsimba: the namespace's prefix has tables in other schemas too") {
			t.Errorf("tenant %s: log %q, want a warning that %s holds the prefix too", s, rec.msgs, tenants[1-i])
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		toks = append(toks, acquire(t, b, open(t, b, 10*time.Second), "x"))
		var v int
		if err := admin.QueryRow(ctxT(t), "SELECT version FROM "+s+"."+prefix+"_schema").Scan(&v); err != nil || v != pgsimba.SchemaVersion {
			t.Errorf("tenant %s at version %d (%v) after its New, want %d", s, v, err, pgsimba.SchemaVersion)
		}
	}
	if toks[0] == 0 || toks[1] == 0 {
		t.Errorf("tokens %v: each tenant's namespace is its own, want a grant in each", toks)
	}
}

// TestCreateWithoutPrivilege: a role that may not create in public (the
// default from PostgreSQL 15 for a role that does not own the database,
// which has its own schema, "$user") is told so, with the way out
// (WithSchema naming its current schema); it got "permission denied for
// schema public" alone. With WithSchema it works.
func TestCreateWithoutPrivilege(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	role := "r_" + sqltest.FreshPrefix()
	for _, q := range []string{"CREATE ROLE " + role + " LOGIN", "CREATE SCHEMA " + role + " AUTHORIZATION " + role, "REVOKE CREATE ON SCHEMA public FROM " + role} {
		if _, err := admin.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+role+" CASCADE")
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	var can bool
	if err := admin.QueryRow(ctxT(t), "SELECT has_schema_privilege($1, 'public', 'CREATE')", role).Scan(&can); err != nil {
		t.Fatalf("has_schema_privilege: %v", err)
	}
	if can {
		t.Skip("the role may create in public here (PUBLIC has CREATE on it: PostgreSQL before 15)")
	}
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	prefix := sqltest.FreshPrefix()
	_, err = pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix))
	if err == nil || !strings.Contains(err.Error(), "WithSchema") || !strings.Contains(err.Error(), `"`+role+`"`) {
		t.Errorf("New by a role that may not create in public = %v, want an error naming WithSchema and the role's own schema", err)
	}
	b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithSchema(role))
	if err != nil {
		t.Fatalf("New(WithSchema(%s)): %v", role, err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	if tok := acquire(t, b, open(t, b, 10*time.Second), "x"); tok == 0 {
		t.Error("no grant in the role's own schema")
	}
}

// TestWithSchema: a namespace bound to a schema by WithSchema is created
// there and found there through pools of any search_path.
func TestWithSchema(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	s := freshSchema(t, admin)
	prefix := sqltest.FreshPrefix()
	var bs []driver.Backend
	for _, p := range []*pgxpool.Pool{admin, poolWith(t, map[string]string{"search_path": "pg_catalog"}, 0)} {
		b, err := pgsimba.New(ctxT(t), p, pgsimba.WithNamespace(prefix), pgsimba.WithSchema(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		bs = append(bs, b)
	}
	exclusive(t, bs[0], bs[1], "x")
	if got := objectsIn(t, admin, prefix); got[s] != 30 || len(got) != 1 {
		t.Errorf("objects by schema: %v, want 30 in %s only", got, s)
	}
	for _, bad := range []string{`a"b`, `a\`} {
		if _, err := pgsimba.New(ctxT(t), admin, pgsimba.WithSchema(bad)); err == nil {
			t.Errorf("WithSchema(%q) accepted", bad)
		}
	}
	_, err := pgsimba.New(ctxT(t), admin, pgsimba.WithNamespace(sqltest.FreshPrefix()), pgsimba.WithSchema("no_such_schema"))
	if err == nil || !strings.Contains(err.Error(), `schema "no_such_schema"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("New in a schema that does not exist = %v, want an error naming it", err)
	}
}

// TestIsolationLevels is issue 21.5: with the pool's default isolation
// repeatable read or serializable, concurrent calls failed with
// SQLSTATE 40001. Whatever the default, every call succeeds and
// exclusion holds (ADR 0171).
func TestIsolationLevels(t *testing.T) {
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			pool := poolWith(t, map[string]string{"default_transaction_isolation": level}, 0)
			b := newBackend(t, pool, "")
			sqltest.ConcurrentCalls(t, b)
			if got, want := b.SetsReadCommitted(), level != "read committed"; got != want {
				t.Errorf("calls set READ COMMITTED themselves: %v, want %v (the routines are written for it)", got, want)
			}
		})
	}
}

// TestForeignTableRefused is issue 21.7 on PostgreSQL: an application's
// own table of one of the namespace's names, of another shape, is
// refused before anything is created or changed, with an error naming it
// and the rule (ADR 0172); so is a routine of its names without its
// tables.
func TestForeignTableRefused(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	for _, tc := range []struct{ name, ddl, names string }{
		{"sessions of another shape", "CREATE TABLE {p}_sessions (id bigint PRIMARY KEY, user_id bigint, data jsonb)", "{p}_sessions"},
		{"leases without sessions", "CREATE TABLE {p}_leases (name text, session_id text, token bigint, held boolean)", "{p}_leases"},
		{"a view", "CREATE VIEW {p}_sessions AS SELECT 'a'::text AS id", "{p}_sessions"},
		{"a routine", "CREATE FUNCTION {p}_open_v1(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'", "{p}_open_v1"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			prefix := sqltest.FreshPrefix()
			t.Cleanup(func() {
				_, _ = admin.Exec(context.Background(), "DROP VIEW IF EXISTS "+prefix+"_sessions")
				_, _ = admin.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+prefix+"_open_v1(text, bigint)")
				dropSchema(t, admin, prefix)
			})
			if _, err := admin.Exec(ctxT(t), strings.ReplaceAll(tc.ddl, "{p}", prefix)); err != nil {
				t.Fatal(err)
			}
			before := objectsIn(t, admin, prefix)
			for _, o := range [][]pgsimba.Option{nil, {pgsimba.OpenExisting()}} {
				_, err := pgsimba.New(ctxT(t), admin, append(o, pgsimba.WithNamespace(prefix))...)
				if name := strings.ReplaceAll(tc.names, "{p}", prefix); !errors.Is(err, sqlbackend.ErrForeignTable) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "never") {
					t.Errorf("New = %v, want ErrForeignTable naming %s and the rule", err, name)
				}
			}
			if got := objectsIn(t, admin, prefix); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("objects by schema %v after the refusal, %v before: something was created", got, before)
			}
		})
	}
}

// TestOpenExisting is issue 22.3's library half: OpenExisting on an
// unknown namespace is an error naming it, matching ErrUnknownNamespace,
// and creates nothing; on an existing one it reads, also through a
// read-only connection.
func TestOpenExisting(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	_, err := pgsimba.New(ctxT(t), admin, pgsimba.WithNamespace(prefix), pgsimba.OpenExisting())
	if !errors.Is(err, sqlbackend.ErrUnknownNamespace) || !strings.Contains(err.Error(), prefix) {
		t.Errorf("OpenExisting on an unknown namespace = %v, want ErrUnknownNamespace naming %s", err, prefix)
	}
	if got := objectsIn(t, admin, prefix); len(got) != 0 {
		t.Errorf("objects after OpenExisting of an unknown namespace: %v", got)
	}
	w := newBackend(t, admin, prefix)
	id := open(t, w, 10*time.Second)
	tok := acquire(t, w, id, "x")
	ro, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"default_transaction_read_only": "on", "search_path": "pg_catalog"}, 0),
		pgsimba.WithNamespace(prefix), pgsimba.OpenExisting())
	if err != nil {
		t.Fatalf("OpenExisting through a read-only pool: %v", err)
	}
	t.Cleanup(func() { _ = ro.Shutdown(context.Background()) })
	hs, err := ro.Inspect(ctxT(t), driver.InspectRequest{Names: []string{"x"}})
	if err != nil || len(hs) != 1 || hs[0].Token != tok {
		t.Errorf("Inspect through a read-only pool = %+v, %v; want x held under %d", hs, err, tok)
	}
}

// TestOpenExistingOlderVersion: a looking tool (OpenExisting) of this
// release reads a namespace that processes of an older release still run
// on (a rolling upgrade), and asks for no migration; it refused every
// older version at first ("run pgsimba.Migration … or start once without
// WithoutSchemaCreation"), so `simba leases` failed during the deploy.
// Version 1, which records no owners, is refused naming why.
func TestOpenExistingOlderVersion(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	for v := 1; v < pgsimba.SchemaVersion; v++ {
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { dropSchema(t, admin, prefix) })
		old, err := pgsimba.SchemaAt(prefix, v)
		if err != nil {
			t.Fatal(err)
		}
		hold := "INSERT INTO {p}_sessions (id, expires_at, lease, version) VALUES ('0123456789abcdef0123456789abcdef', clock_timestamp() + interval '1 minute', interval '1 minute', 2); " +
			"INSERT INTO {p}_leases (name, session_id, token, held) VALUES ('x', '0123456789abcdef0123456789abcdef', 7, true)"
		if _, err := admin.Exec(ctxT(t), "BEGIN; "+old+"; "+strings.ReplaceAll(hold, "{p}", prefix)+"; COMMIT"); err != nil {
			t.Fatal(err)
		}
		b, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"default_transaction_read_only": "on"}, 0), pgsimba.WithNamespace(prefix), pgsimba.OpenExisting())
		if v == 1 {
			if !errors.Is(err, sqlbackend.ErrSchemaVersion) || !strings.Contains(err.Error(), "version 2 and later") {
				t.Errorf("OpenExisting on version 1 = %v, want ErrSchemaVersion saying it reads version 2 and later", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("OpenExisting on version %d: %v", v, err)
			continue
		}
		hs, err := b.Inspect(ctxT(t), driver.InspectRequest{Names: []string{"x"}})
		if err != nil || len(hs) != 1 || hs[0].Token != 7 {
			t.Errorf("Inspect of version %d = %+v, %v; want x held under 7", v, hs, err)
		}
		_ = b.Shutdown(context.Background())
		var got int
		if err := admin.QueryRow(ctxT(t), "SELECT version FROM "+prefix+"_schema").Scan(&got); err != nil || got != v {
			t.Errorf("version %d (%v) after OpenExisting of version %d: changed", got, err, v)
		}
	}
}

// TestPoolSettings is the rest of the matrix for PostgreSQL: a read-only
// connection is refused at start, naming the setting; under
// statement_timeout, idle_session_timeout and a pool of one connection
// calls work and exclusion holds.
func TestPoolSettings(t *testing.T) {
	_, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"default_transaction_read_only": "on"}, 0), pgsimba.WithNamespace(sqltest.FreshPrefix()))
	if !errors.Is(err, sqlbackend.ErrReadOnly) || !strings.Contains(err.Error(), "default_transaction_read_only") {
		t.Errorf("New on a read-only pool = %v, want ErrReadOnly naming default_transaction_read_only", err)
	}
	for _, tc := range []struct {
		name   string
		params map[string]string
		conns  int32
	}{
		{"statement_timeout", map[string]string{"statement_timeout": "2s"}, 0},
		{"idle_session_timeout", map[string]string{"idle_session_timeout": "100ms"}, 0},
		{"one_connection", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := sqltest.FreshPrefix()
			a := newBackend(t, poolWith(t, tc.params, tc.conns), prefix)
			b, err := newBackendNoDrop(t, poolWith(t, tc.params, tc.conns), prefix)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "idle_session_timeout" {
				time.Sleep(300 * time.Millisecond) // the server ends the idle connections
			}
			exclusive(t, a, b, "x")
			sqltest.ConcurrentCalls(t, a)
		})
	}
}

// TestRoutinesKeepTransactionSettings: the search_path clause that schema
// version 6 puts on every routine (ADR 0170) restores only search_path on
// return; the routines' own settings for the caller's transaction (the WAL
// flush raised from off, ADR 0160; the lock-wait bound) outlive the call
// until the commit.
func TestRoutinesKeepTransactionSettings(t *testing.T) {
	pool := poolWith(t, map[string]string{"synchronous_commit": "off", "search_path": "pg_catalog"}, 1)
	prefix := sqltest.FreshPrefix()
	newBackend(t, pool, prefix)
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var rem int64
	var sync, wait, path string
	if err := tx.QueryRow(ctxT(t), "SELECT public."+prefix+"_open_v5($1, 1000000, '', 1234)", "00000000000000000000000000000001").Scan(&rem); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctxT(t), "SELECT current_setting('synchronous_commit'), current_setting('lock_timeout'), current_setting('search_path')").Scan(&sync, &wait, &path); err != nil {
		t.Fatal(err)
	}
	if sync != "local" || wait != "1234ms" || path != "pg_catalog" {
		t.Errorf("after open_v5 in a transaction: synchronous_commit %q, lock_timeout %q, search_path %q; want local, 1234ms, pg_catalog", sync, wait, path)
	}
}

// TestMigrationWhileOldProcessesCall: the version 5 to 6 migration (a
// search_path on every routine, ADR 0170) run by six new processes at
// once, while a process of the last release goes on calling the version 5
// routines unqualified, by its search_path, as that release did: every
// call of both succeeds.
func TestMigrationWhileOldProcessesCall(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, admin, prefix) })
	old, err := pgsimba.SchemaAt(prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "BEGIN; "+old+"; INSERT INTO "+prefix+"_epoch VALUES (1, clock_timestamp()); COMMIT"); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	stop := make(chan struct{})
	oldErr := make(chan error, 1)
	var calls int
	go func() {
		defer close(oldErr)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("%032x", i)
			var rem int64
			var toks []int64
			var n int
			for _, c := range []struct {
				q    string
				args []any
				dest any
			}{
				{"SELECT " + prefix + "_open_v4($1, 1000000, '', 1000)", []any{id}, &rem},
				{"SELECT " + prefix + "_acquire_v4($1, ARRAY['y'], 1000000, 1000)", []any{id}, &toks},
				{"SELECT " + prefix + "_close_v3($1, 1000)", []any{id}, &n},
			} {
				err := admin.QueryRow(ctx, c.q, c.args...).Scan(c.dest)
				if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "SX003" && strings.Contains(c.q, "_acquire_v4") {
					// Version 7 refuses the older grants loudly (ADR
					// 0250) once it is installed; the rest still runs.
					err = nil
				}
				if err != nil {
					oldErr <- fmt.Errorf("the last release's call %s: %w", c.q, err)
					return
				}
				calls++
			}
		}
	}()
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		go func() {
			b, err := pgsimba.New(ctx, newPool(t, pgURL(t), nil), pgsimba.WithNamespace(prefix))
			if err == nil {
				defer b.Shutdown(context.Background())
				_, err = b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Second})
			}
			errs <- err
		}()
	}
	for i := 0; i < 6; i++ {
		if err := <-errs; err != nil {
			t.Errorf("a new process: %v", err)
		}
	}
	close(stop)
	if err := <-oldErr; err != nil {
		t.Error(err)
	}
	var v int
	if err := admin.QueryRow(ctx, "SELECT version FROM "+prefix+"_schema").Scan(&v); err != nil || v != pgsimba.SchemaVersion {
		t.Errorf("version %d (%v) after the migration, want %d", v, err, pgsimba.SchemaVersion)
	}
	t.Logf("%d calls of the last release meanwhile", calls)
}

// TestMigrationInSchema: a user who runs migrations (WithoutSchemaCreation)
// on a namespace outside public is told to take MigrationIn's script, and
// that script, run through a pool whose search_path misses the schema,
// upgrades the namespace in its schema.
func TestMigrationInSchema(t *testing.T) {
	admin := newPool(t, pgURL(t), nil)
	app := freshSchema(t, admin)
	prefix := sqltest.FreshPrefix()
	old, err := pgsimba.SchemaAt(prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "BEGIN; SET LOCAL search_path = "+app+"; "+old+"; INSERT INTO "+app+"."+prefix+"_epoch VALUES (1, clock_timestamp()); COMMIT"); err != nil {
		t.Fatal(err)
	}
	b, err := pgsimba.New(ctxT(t), admin, pgsimba.WithNamespace(prefix), pgsimba.WithoutSchemaCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	_, err = b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second})
	if !errors.Is(err, sqlbackend.ErrSchemaVersion) || !strings.Contains(err.Error(), `pgsimba.MigrationIn("`+app+`"`) {
		t.Fatalf("Open on version 5 in %s = %v, want ErrSchemaVersion naming MigrationIn(%q, …)", app, err, app)
	}
	script, err := pgsimba.MigrationIn(app, prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "BEGIN; "+script+"; COMMIT"); err != nil {
		t.Fatalf("MigrationIn's script: %v", err)
	}
	c, err := pgsimba.New(ctxT(t), poolWith(t, map[string]string{"search_path": "pg_catalog"}, 0), pgsimba.WithNamespace(prefix), pgsimba.WithoutSchemaCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	if tok := acquire(t, c, open(t, c, 10*time.Second), "x"); tok == 0 {
		t.Error("no grant after the migration")
	}
	if got := objectsIn(t, admin, prefix); got[app] != 30 || len(got) != 1 {
		t.Errorf("objects by schema: %v, want 30 in %s only", got, app)
	}
}
