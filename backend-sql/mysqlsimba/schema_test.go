package mysqlsimba_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestSchemaVersions(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	sqltest.RunSchema(t, sqltest.Schema{
		Version: mysqlsimba.SchemaVersion,
		Label:   "mysqlsimba",
		New: func(t *testing.T, prefix string, create bool) (driver.Backend, error) {
			opts := []mysqlsimba.Option{mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second)}
			if !create {
				opts = append(opts, mysqlsimba.WithoutSchemaCreation())
			}
			b, err := mysqlsimba.New(ctxT(t), db, opts...)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b, nil
		},
		Install: func(t *testing.T, prefix string, v int) {
			stmts, err := mysqlsimba.SchemaAt(prefix, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if _, err := db.ExecContext(ctxT(t), s); err != nil {
					t.Fatalf("installing schema version %d: %v", v, err)
				}
			}
		},
		OpenFirst: func(t *testing.T, prefix string, id driver.ID) {
			if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_open_v1(?, 600000000)", string(id)); err != nil {
				t.Fatalf("open_v1: %v", err)
			}
		},
		AcquireFirst: func(t *testing.T, prefix string, id driver.ID, name string) uint64 {
			var out string
			if err := db.QueryRowContext(ctxT(t), "CALL "+prefix+"_acquire_v1(?, ?)", string(id), name).Scan(&out); err != nil {
				t.Fatalf("acquire_v1: %v", err)
			}
			tok, err := strconv.ParseUint(out, 10, 64)
			if err != nil || tok == 0 {
				t.Fatalf("acquire_v1 answered %q", out)
			}
			return tok
		},
		SetVersion: func(t *testing.T, prefix string, v, compat int) {
			if _, err := db.ExecContext(ctxT(t), "UPDATE "+prefix+"_schema SET version = ?, compatible_from = ?", v, compat); err != nil {
				t.Fatal(err)
			}
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, db, prefix) },
	})
}

func TestDataLoss(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	exec := func(t *testing.T, stmts ...string) {
		for _, s := range stmts {
			if _, err := db.ExecContext(ctxT(t), s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	sqltest.RunLoss(t, sqltest.Loss{
		New: func(t *testing.T, prefix string, maxLease time.Duration) driver.Backend {
			b, err := mysqlsimba.New(ctxT(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(maxLease))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b
		},
		Exec: exec,
		Drop: func(t testing.TB, prefix string) { dropSchema(t, db, prefix) },
		SkipQuarantine: func(t *testing.T, prefix string) {
			stmts, err := mysqlsimba.AcquireWithoutQuarantine(prefix)
			if err != nil {
				t.Fatal(err)
			}
			exec(t, stmts...)
		},
	})
}

// TestOperatorQuarantineIsImmediate: the operator's step of the README
// after a restore or an asynchronous failover (DELETE the epoch row, then
// CALL lost_v1) quarantines at once, also a session that only takes back a
// lease it released (acquire's usual path reads only the session's row).
func TestOperatorQuarantineIsImmediate(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	id := sqltest.Open(t, b, 10*time.Second)
	tok := sqltest.Acquire(t, b, id, "x")
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"DELETE FROM " + prefix + "_epoch", "CALL " + prefix + "_lost_v1(30000000, @until)"} {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
	if err != nil || rep.Quarantine <= 29*time.Second || rep.Results[0].Token != 0 {
		t.Fatalf("Acquire of a released lease right after the operator's step = %+v, %v; want a quarantine of about 30s", rep, err)
	}
}

// An Acquire that finds a loss another finder is noting waits for it and
// then reads what it wrote: acquire_v2's second transaction, which notes
// the loss, is READ COMMITTED like the first. It used to run at the
// session's default level (SET TRANSACTION applies to the next
// transaction only), REPEATABLE READ, so lost_v1 read the epoch row from a
// snapshot taken before its wait for the <p>_schema row and answered
// "nothing granted, no quarantine" in the middle of a 30 s quarantine.
func TestAcquireAfterAnotherFinderReportsItsQuarantine(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	id := sqltest.Open(t, b, 10*time.Second)
	ctx := ctxT(t)
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE "+prefix+"_leases"); err != nil {
		t.Fatal(err)
	}
	// The first finder: holds the schema row while the Acquire starts.
	first, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }()
	for _, s := range []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION", "SELECT id FROM " + prefix + "_schema WHERE id = 1 FOR UPDATE"} {
		if _, err := first.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	type result struct {
		rep driver.AcquireReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"x"}})
		done <- result{rep, err}
	}()
	// Wait until the Acquire, its grant refused, waits for the schema row
	// in lost_v1.
	for {
		var n int
		// PROCESSLIST, not INNODB_TRX: MariaDB 10.11 does not always list a
		// statement of a stored procedure waiting for a row lock there as
		// LOCK WAIT (seen failing in a clean-clone CI run).
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND INFO LIKE ?", "%"+prefix+"_schema%FOR UPDATE%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("Acquire returned before it waited for the first finder: %+v, %v", r.rep, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	var until string
	if _, err := first.ExecContext(ctx, "CALL "+prefix+"_lost_v1(30000000, @until)"); err != nil {
		t.Fatal(err)
	}
	if err := first.QueryRowContext(ctx, "SELECT CAST(@until AS CHAR)").Scan(&until); err != nil {
		t.Fatal(err)
	}
	if _, err := first.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.rep.Quarantine <= 29*time.Second || r.rep.Results[0].Token != 0 {
		t.Fatalf("Acquire that waited for the first finder = %+v, %v; want the first finder's quarantine of about 30s", r.rep, r.err)
	}
	var got string
	if err := db.QueryRowContext(ctx, "SELECT CAST(quarantine_until AS CHAR) FROM "+prefix+"_epoch WHERE id = 1").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != until {
		t.Fatalf("the first finder's quarantine ends at %s; after the Acquire it ends at %s: pushed on", until, got)
	}
}
