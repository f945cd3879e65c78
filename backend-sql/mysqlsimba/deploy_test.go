package mysqlsimba_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// The deployment matrix on MySQL/MariaDB (issue 21, docs/deployment/sql.md):
// session settings of the user's handle, given through the DSN (the driver
// sets them on every connection), never to the shared server.

// dbWith returns a handle whose connections run with the session
// variables given (values as SQL literals).
func dbWith(t testing.TB, vars map[string]string) *sql.DB {
	t.Helper()
	d := dsn(t)
	sep := "?"
	if strings.Contains(d, "?") {
		sep = "&"
	}
	for k, v := range vars {
		d += sep + k + "=" + url.QueryEscape(v)
		sep = "&"
	}
	return newDB(t, d, nil)
}

// tablesOf lists the namespace's tables and routines in the database.
func tablesOf(t testing.TB, db *sql.DB, prefix string) []string {
	t.Helper()
	rows, err := db.QueryContext(sqltest.Ctx(t), `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '\_%')
	  UNION ALL SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE() AND routine_name LIKE CONCAT(?, '\_%') ORDER BY 1`, prefix, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestIsolationLevels is issue 21.5 on MariaDB: whatever the session's
// default isolation, concurrent calls succeed and exclusion holds.
func TestIsolationLevels(t *testing.T) {
	for _, level := range []string{"READ-COMMITTED", "REPEATABLE-READ", "SERIALIZABLE"} {
		t.Run(level, func(t *testing.T) {
			db := dbWith(t, map[string]string{"tx_isolation": "'" + level + "'"})
			var got string
			if err := db.QueryRowContext(sqltest.Ctx(t), "SELECT @@tx_isolation").Scan(&got); err != nil || got != level {
				t.Fatalf("the session's isolation is %q (%v), want %s", got, err, level)
			}
			b := newBackend(t, db, "")
			sqltest.ConcurrentCalls(t, b)
		})
	}
}

// TestSessionSettings: sql_mode ANSI (ANSI_QUOTES, ONLY_FULL_GROUP_BY
// among it) and the other modes users set keep every call working, for
// the process that created the namespace under the mode and for one that
// runs under the server's default. A procedure keeps the sql_mode it was
// created with: created under ORACLE (PL/SQL syntax) New failed with a
// syntax error, and under EMPTY_STRING_IS_NULL every acquire of every
// process answered NULL; Inspect found no holder under
// EMPTY_STRING_IS_NULL (its empty prefix read as NULL).
func TestSessionSettings(t *testing.T) {
	for _, mode := range []string{"'ANSI'", "'ANSI_QUOTES,ONLY_FULL_GROUP_BY,STRICT_ALL_TABLES'", "'TRADITIONAL'",
		"'ORACLE'", "'EMPTY_STRING_IS_NULL'", "'NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT,HIGH_NOT_PRECEDENCE,IGNORE_SPACE'"} {
		t.Run(strings.Trim(mode, "'"), func(t *testing.T) {
			db := dbWith(t, map[string]string{"sql_mode": mode})
			prefix := sqltest.FreshPrefix()
			a := newBackend(t, db, prefix)
			b, err := mysqlsimba.New(sqltest.Ctx(t), newDB(t, dsn(t), nil), mysqlsimba.WithNamespace(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			ta := sqltest.Acquire(t, a, sqltest.Open(t, a, 10*time.Second), "x")
			tb := sqltest.Acquire(t, b, sqltest.Open(t, b, 10*time.Second), "x")
			if (ta == 0) == (tb == 0) {
				t.Fatalf("tokens %d and %d: want exactly one grant", ta, tb)
			}
			for _, req := range []driver.InspectRequest{{}, {Prefix: "x"}, {Names: []string{"x"}}} {
				if hs, err := a.Inspect(sqltest.Ctx(t), req); err != nil || len(hs) != 1 || hs[0].Token != max(ta, tb) {
					t.Errorf("Inspect(%+v) under the mode = %+v, %v; want x held under %d", req, hs, err, max(ta, tb))
				}
			}
			var got string
			if err := db.QueryRowContext(sqltest.Ctx(t), "SELECT @@SESSION.sql_mode").Scan(&got); err != nil || strings.Contains(got, "STRICT_TRANS_TABLES") && !strings.Contains(mode, "TRADITIONAL") {
				t.Errorf("the pool's connection has sql_mode %q (%v) after New: want its own back", got, err)
			}
			sqltest.ConcurrentCalls(t, a)
			sqltest.ConcurrentCalls(t, b)
		})
	}
}

// TestReadOnlyRefused: a read-only session (tx_read_only) is refused at
// start, naming the setting, and nothing is created.
func TestReadOnlyRefused(t *testing.T) {
	prefix := sqltest.FreshPrefix()
	db := dbWith(t, map[string]string{"tx_read_only": "1"})
	_, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(prefix))
	if !errors.Is(err, sqlbackend.ErrReadOnly) || !strings.Contains(err.Error(), "read_only") {
		t.Errorf("New on a read-only session = %v, want ErrReadOnly naming the setting", err)
	}
	if got := tablesOf(t, newDB(t, dsn(t), nil), prefix); len(got) != 0 {
		t.Errorf("objects after the refusal: %v", got)
	}
}

// TestAutocommitOffRefused: a handle whose connections run with
// autocommit off (DSN autocommit=0) is refused at start, naming the
// setting, by New (nothing created), WithoutSchemaCreation's first call
// and OpenExisting. New used to succeed and every Open then failed with
// error 1568 (the procedures' SET TRANSACTION inside the transaction a
// previous statement had left open).
func TestAutocommitOffRefused(t *testing.T) {
	prefix := sqltest.FreshPrefix()
	db := dbWith(t, map[string]string{"autocommit": "0"})
	_, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(prefix))
	if !errors.Is(err, sqlbackend.ErrSessionSetting) || !strings.Contains(err.Error(), "autocommit") {
		t.Errorf("New with autocommit off = %v, want ErrSessionSetting naming autocommit", err)
	}
	if got := tablesOf(t, newDB(t, dsn(t), nil), prefix); len(got) != 0 {
		t.Errorf("objects after the refusal: %v", got)
	}
	newBackend(t, newDB(t, dsn(t), nil), prefix)
	for _, o := range []mysqlsimba.Option{mysqlsimba.OpenExisting(), mysqlsimba.WithoutSchemaCreation()} {
		b, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(prefix), o)
		if err == nil {
			_, err = b.Open(sqltest.Ctx(t), driver.OpenRequest{LeaseDuration: time.Second})
			_ = b.Shutdown(context.Background())
		}
		if !errors.Is(err, sqlbackend.ErrSessionSetting) || !strings.Contains(err.Error(), "autocommit") {
			t.Errorf("with autocommit off (OpenExisting, or the first call under WithoutSchemaCreation): %v, want ErrSessionSetting naming autocommit", err)
		}
	}
}

// TestCreateWithoutPrivilege: a user without CREATE ROUTINE is told which
// privileges New needs, and the way round (WithoutSchemaCreation); it got
// the server's "Access denied … to database" alone.
func TestCreateWithoutPrivilege(t *testing.T) {
	root := newDB(t, dsn(t), nil)
	var host, db string
	if err := root.QueryRowContext(sqltest.Ctx(t), "SELECT SUBSTRING_INDEX(USER(), '@', -1), DATABASE()").Scan(&host, &db); err != nil {
		t.Fatal(err)
	}
	user := "u_" + sqltest.FreshPrefix()
	for _, q := range []string{"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON `" + db + "`.* TO '" + user + "'@'%'"} {
		if _, err := root.ExecContext(sqltest.Ctx(t), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = root.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'") })
	cfg, err := mysql.ParseDSN(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, "pw"
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, root, prefix) })
	_, err = mysqlsimba.New(sqltest.Ctx(t), newDB(t, cfg.FormatDSN(), nil), mysqlsimba.WithNamespace(prefix))
	if err == nil || !strings.Contains(err.Error(), "CREATE ROUTINE") || !strings.Contains(err.Error(), "WithoutSchemaCreation") {
		t.Errorf("New without CREATE ROUTINE = %v, want an error naming the privilege and WithoutSchemaCreation", err)
	}
}

// TestSurveyReadsOneDatabase: the survey that New (and OpenExisting, and
// the first call under WithoutSchemaCreation) runs reads information_schema
// for the namespace's tables only. It joined tables with columns, and
// MariaDB filled columns from every table and view of every database on
// the server ("Scanned all databases"): slow on a large server, and a
// shared MariaDB 10.11 died running it (signal 11 opening a view's
// structure while other databases changed).
func TestSurveyReadsOneDatabase(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	var version string
	if err := db.QueryRowContext(sqltest.Ctx(t), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatalf("SELECT VERSION(): %v", err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Skipf("EXPLAIN of information_schema reads is MariaDB's (server %q): a MySQL server plans it otherwise", version)
	}
	stmts, args := mysqlsimba.SurveyStatements(sqltest.FreshPrefix())
	for _, st := range stmts {
		rows, err := db.QueryContext(sqltest.Ctx(t), "EXPLAIN "+st, args...)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				if c == "Extra" && strings.Contains(vals[i].String, "Scanned all databases") {
					t.Errorf("the survey's %q reads every database: %s", st, vals[i].String)
				}
			}
		}
		rows.Close()
	}
}

// TestForeignTableRefused is issue 21.7: an application's own table of
// one of the namespace's names is neither altered nor written; New fails
// naming it and the rule, and leaves nothing behind (ADR 0172).
func TestForeignTableRefused(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	for _, tc := range []struct{ name, ddl, table string }{
		{"sessions of another shape", "CREATE TABLE {p}_sessions (id BIGINT PRIMARY KEY, user_id BIGINT, data TEXT)", "{p}_sessions"},
		{"leases without sessions", "CREATE TABLE {p}_leases (name VARCHAR(255) PRIMARY KEY, session_id VARCHAR(64), token BIGINT)", "{p}_leases"},
		{"a view", "CREATE VIEW {p}_schema AS SELECT 1 AS id, 4 AS version, 1 AS compatible_from", "{p}_schema"},
		{"a procedure", "CREATE PROCEDURE {p}_open_v1(IN p_id VARCHAR(64)) SELECT 1", "{p}_open_v1"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			prefix := sqltest.FreshPrefix()
			t.Cleanup(func() {
				_, _ = db.ExecContext(context.Background(), "DROP VIEW IF EXISTS "+prefix+"_schema")
				dropSchema(t, db, prefix)
			})
			if _, err := db.ExecContext(sqltest.Ctx(t), strings.ReplaceAll(tc.ddl, "{p}", prefix)); err != nil {
				t.Fatal(err)
			}
			before := fmt.Sprint(tablesOf(t, db, prefix))
			var shape string
			if err := db.QueryRowContext(sqltest.Ctx(t), "SELECT COALESCE(GROUP_CONCAT(column_name ORDER BY ordinal_position), '') FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?", strings.ReplaceAll(tc.table, "{p}", prefix)).Scan(&shape); err != nil {
				t.Fatal(err)
			}
			for _, o := range [][]mysqlsimba.Option{nil, {mysqlsimba.OpenExisting()}} {
				_, err := mysqlsimba.New(sqltest.Ctx(t), db, append(o, mysqlsimba.WithNamespace(prefix))...)
				if name := strings.ReplaceAll(tc.table, "{p}", prefix); !errors.Is(err, sqlbackend.ErrForeignTable) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "never") {
					t.Errorf("New = %v, want ErrForeignTable naming %s and the rule", err, name)
				}
			}
			if got := fmt.Sprint(tablesOf(t, db, prefix)); got != before {
				t.Errorf("objects %s after the refusal, %s before: something was created or dropped", got, before)
			}
			var after string
			if err := db.QueryRowContext(sqltest.Ctx(t), "SELECT COALESCE(GROUP_CONCAT(column_name ORDER BY ordinal_position), '') FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?", strings.ReplaceAll(tc.table, "{p}", prefix)).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after != shape {
				t.Errorf("the application's table has columns %q after New, %q before: altered", after, shape)
			}
		})
	}
}

// TestOpenExistingOlderVersion: a looking tool (OpenExisting) reads a
// namespace of an older version that processes not yet upgraded run on,
// and asks for no migration; it refused every older version at first.
// Version 1, which records no owners, is refused naming why.
func TestOpenExistingOlderVersion(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	for v := 1; v < mysqlsimba.SchemaVersion; v++ {
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { dropSchema(t, db, prefix) })
		stmts, err := mysqlsimba.SchemaAt(prefix, v)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts,
			"INSERT INTO "+prefix+"_sessions (id, expires_at, lease_us, version) VALUES ('0123456789abcdef0123456789abcdef', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, 60000000, 2)",
			"INSERT INTO "+prefix+"_leases (name, session_id, token, held) VALUES ('x', '0123456789abcdef0123456789abcdef', 7, 1)")
		for _, st := range stmts {
			if _, err := db.ExecContext(sqltest.Ctx(t), st); err != nil {
				t.Fatal(err)
			}
		}
		b, err := mysqlsimba.New(sqltest.Ctx(t), dbWith(t, map[string]string{"tx_read_only": "1"}), mysqlsimba.WithNamespace(prefix), mysqlsimba.OpenExisting())
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
		hs, err := b.Inspect(sqltest.Ctx(t), driver.InspectRequest{Names: []string{"x"}})
		if err != nil || len(hs) != 1 || hs[0].Token != 7 {
			t.Errorf("Inspect of version %d = %+v, %v; want x held under 7", v, hs, err)
		}
		_ = b.Shutdown(context.Background())
	}
}

// TestOpenExisting is issue 22.3's library half on MySQL/MariaDB.
func TestOpenExisting(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	_, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.OpenExisting())
	if !errors.Is(err, sqlbackend.ErrUnknownNamespace) || !strings.Contains(err.Error(), prefix) {
		t.Errorf("OpenExisting on an unknown namespace = %v, want ErrUnknownNamespace naming %s", err, prefix)
	}
	if got := tablesOf(t, db, prefix); len(got) != 0 {
		t.Errorf("objects after OpenExisting of an unknown namespace: %v", got)
	}
	w := newBackend(t, db, prefix)
	tok := sqltest.Acquire(t, w, sqltest.Open(t, w, 10*time.Second), "x")
	ro, err := mysqlsimba.New(sqltest.Ctx(t), dbWith(t, map[string]string{"tx_read_only": "1"}), mysqlsimba.WithNamespace(prefix), mysqlsimba.OpenExisting())
	if err != nil {
		t.Fatalf("OpenExisting through a read-only session: %v", err)
	}
	t.Cleanup(func() { _ = ro.Shutdown(context.Background()) })
	hs, err := ro.Inspect(sqltest.Ctx(t), driver.InspectRequest{Names: []string{"x"}})
	if err != nil || len(hs) != 1 || hs[0].Token != tok {
		t.Errorf("Inspect through a read-only session = %+v, %v; want x held under %d", hs, err, tok)
	}
}
