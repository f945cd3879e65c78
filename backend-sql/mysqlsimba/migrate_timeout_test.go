package mysqlsimba_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
)

// The migration to version 5 folds and deletes every released row of the
// namespace: on a namespace of many names it runs longer than a
// max_statement_time an operator sets against runaway queries, and it
// must complete all the same. Scaled down: 200,000 released rows and
// max_statement_time = 0.1 s (found by review "revsql": New failed with
// "Query execution was interrupted (max_statement_time exceeded)" at
// every start, as PostgreSQL's did under statement_timeout).
func TestMigrationOutlastsMaxStatementTime(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	var version string
	if err := db.QueryRowContext(ctxT(t), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Logf("%s has no max_statement_time (MySQL's max_execution_time bounds SELECTs only): the case is MariaDB's", version)
		return
	}
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, db, prefix) })
	stmts, err := mysqlsimba.SchemaAt(prefix, 4)
	if err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, "INSERT INTO "+prefix+"_epoch VALUES (1, UTC_TIMESTAMP(6))",
		"INSERT INTO "+prefix+"_leases (name, session_id, token, held) SELECT CONCAT('order:', seq), NULL, seq, 0 FROM seq_1_to_200000")
	for _, s := range stmts {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	limited := newDB(t, dsn(t)+sep(dsn(t))+"max_statement_time=0.1", nil)
	limited.SetMaxOpenConns(1) // the migration's connection is the one checked after
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := mysqlsimba.New(ctx, limited, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second))
	if err != nil {
		t.Fatalf("New on a namespace of 200,000 released names under max_statement_time = 0.1: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	var left float64
	if err := limited.QueryRowContext(ctxT(t), "SELECT @@SESSION.max_statement_time").Scan(&left); err != nil || left != 0.1 {
		t.Fatalf("the pool's connection came back with max_statement_time = %v (%v), want its own 0.1", left, err)
	}
	l, _ := myRows(t, db, prefix)
	if l != 1 {
		t.Fatalf("rows after the migration: %d (want the marker only)", l)
	}
}

func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
