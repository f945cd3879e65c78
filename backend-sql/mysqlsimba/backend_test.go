package mysqlsimba_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// TestBackend runs the SQL tests both dialects share (see package sqltest).
func TestBackend(t *testing.T) { sqltest.Run(t, harness(t)) }

// Lease names are case-sensitive, as on every backend: the columns use a
// binary collation, not MySQL's case-insensitive default.
func TestNamesAreCaseSensitive(t *testing.T) {
	b := newBackend(t, newDB(t, dsn(t), nil), "")
	a, c := sqltest.Open(t, b, 1e10), sqltest.Open(t, b, 1e10)
	if sqltest.Acquire(t, b, a, "Leader") == 0 || sqltest.Acquire(t, b, c, "leader") == 0 {
		t.Fatal("Leader and leader must be two different leases")
	}
}

func TestSchemaValidatesPrefix(t *testing.T) {
	if _, err := mysqlsimba.Schema("Bad-Prefix"); err == nil {
		t.Error("Schema accepted an invalid prefix")
	}
	s, err := mysqlsimba.Schema("app")
	if err != nil || len(s) != 43 || !strings.Contains(s[0], "app_sessions") || !strings.Contains(s[42], "app_epoch") {
		t.Errorf("Schema(app) = %d statements, %v", len(s), err)
	}
}

func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	b, err := mysqlsimba.New(ctx, db, mysqlsimba.WithNamespace("myapp"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	// Hand b to the session engine; it is a driver.Backend. Candidates
	// poll: MySQL has no LISTEN/NOTIFY.
	var _ driver.Backend = b
}

// With WithoutSchemaCreation the backend relies on the user's migration:
// it fails until the statements from Schema have been run, then works.
func TestSchemaFromMigration(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, db, prefix) })
	b, err := mysqlsimba.New(sqltest.Ctx(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithoutSchemaCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	if _, err := b.Open(sqltest.Ctx(t), driver.OpenRequest{LeaseDuration: time.Second}); err == nil {
		t.Fatal("Open succeeded without a schema")
	}
	stmts, err := mysqlsimba.Schema(prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(sqltest.Ctx(t), s); err != nil {
			t.Fatalf("running Schema: %v", err)
		}
	}
	if tok := sqltest.Acquire(t, b, sqltest.Open(t, b, time.Second), "m"); tok == 0 {
		t.Fatal("no token after the migration")
	}
}

// A namespace installed by an earlier release is upgraded by the first New
// without WithoutSchemaCreation; teams that run migrations themselves run
// these statements, in order, instead.
func ExampleMigration() {
	stmts, err := mysqlsimba.Migration("myapp", 1) // from schema version 1
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(stmts), strings.HasPrefix(stmts[0], "ALTER TABLE myapp_sessions"))
	// Output: 35 true
}

// WithMaxLease caps every session's lease, and is the quarantine after the
// namespace's tables lost their rows: mysqlsimba.New(ctx, db,
// mysqlsimba.WithMaxLease(10*time.Second)) grants at most 10s, and after a
// loss no lease for 10s. A cap under 1ms is refused before any I/O.
func ExampleWithMaxLease() {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test") // connects lazily
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	_, err = mysqlsimba.New(context.Background(), db, mysqlsimba.WithMaxLease(-time.Second))
	fmt.Println(err)
	// Output: mysqlsimba: WithMaxLease(-1s): want at least 1ms
}

// TestCheckServer: on the real server, CheckServer warns exactly when its
// innodb_flush_log_at_trx_commit loses acknowledged commits in a crash (0
// or 2; ADR 0160).
func TestCheckServer(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b := newBackend(t, db, "")
	var flush string
	if err := db.QueryRowContext(ctxT(t), "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit").Scan(&flush); err != nil {
		t.Fatal(err)
	}
	w, err := b.CheckServer(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if lossy := flush == "0" || flush == "2"; lossy != (len(w) == 1) || len(w) > 1 {
		t.Fatalf("innodb_flush_log_at_trx_commit %s: warnings %q", flush, w)
	}
}

// WithMaxLockDelay lets an Acquire ask for a lock-delay up to d (see
// pgsimba's): the delay counts from the session's expiry on the server's
// UTC_TIMESTAMP(6). A negative maximum is refused before any I/O.
func ExampleWithMaxLockDelay() {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test") // connects lazily
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	_, err = mysqlsimba.New(context.Background(), db, mysqlsimba.WithMaxLockDelay(-time.Second))
	fmt.Println(err)
	// Output: mysqlsimba: WithMaxLockDelay(-1s): want 0 or more
}
