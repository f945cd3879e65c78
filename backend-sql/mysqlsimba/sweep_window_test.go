package mysqlsimba_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// Held rows from before the migration to version 5 (legacy rows) are
// never swept; 100 expired sessions that hold one each must not keep
// open_v4's sweep from ever reaching the sessions that expired later
// (found by review "revsql": the sweep took the first 100 expired
// sessions, sweepable or not, so a namespace upgraded with 100 crashed
// holders grew again by a row per name).
func TestSweepSkipsSessionsItCannotSweep(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, db, prefix) })
	stmts, err := mysqlsimba.SchemaAt(prefix, 4)
	if err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, "INSERT INTO "+prefix+"_epoch VALUES (1, UTC_TIMESTAMP(6))")
	for _, s := range stmts {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// 100 processes of version 4 each hold a name, then stop (crash): their
	// sessions expire with the rows held. Their ids happen to sort first.
	for i := 0; i < 100; i++ {
		id := fmt.Sprintf("%032d", i+1)
		if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_open_v3(?, 5000000, '', 1000000, 5000)", id); err != nil {
			t.Fatal(err)
		}
		var out string
		if err := db.QueryRowContext(ctxT(t), "CALL "+prefix+"_acquire_v2(?, ?, 1000000, 5000)", id, fmt.Sprintf("crashed:%d", i)).Scan(&out); err != nil || out == "0" {
			t.Fatalf("acquire_v2: %q, %v", out, err)
		}
	}
	b, err := mysqlsimba.New(ctxT(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	// A version 5 holder of a fresh name, whose session then expires too.
	deadline := time.Now().Add(15 * time.Second)
	var a driver.ID
	for {
		a = sqltest.Open(t, b, 300*time.Millisecond)
		if tok := myAcquire(t, b, a, "fresh:x", 0); tok != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fresh:x never granted")
		}
		<-time.After(50 * time.Millisecond) // the upgrade's quarantine (1s)
	}
	var crashedExp int64
	if err := db.QueryRowContext(ctxT(t), "SELECT MAX(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at)) FROM "+prefix+"_sessions WHERE id <> '~epoch'").Scan(&crashedExp); err != nil {
		t.Fatal(err)
	}
	myUntil(t, db, max(crashedExp, myExpiry(t, db, prefix, a)))
	// Opens sweep: the expired holder of fresh:x has a row the sweep may
	// delete (no delay, not legacy).
	for i := 0; i < 3; i++ {
		sqltest.Open(t, b, time.Minute)
	}
	var n int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = 'fresh:x'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("fresh:x's row is still there after 3 opens: the sweep spent its 100 sessions on the 100 holders of legacy rows it never deletes")
	}
}

// The sweep in open_v4 locks no row of a live session: a transaction
// holding a live holder's lease row and its session row (as a release or
// an acquire does at its end, or a renewal) does not hold up an Open. The sweep's DELETE
// over both tables' scans waited for every such lock, and deadlocked
// with releases under eight concurrent cycles (CI, Error 1213 past the
// retries). Also with SERIALIZABLE as the pool's default, under which a
// plain SELECT in a transaction locks what it reads: the routine's own
// transactions are READ COMMITTED.
func TestSweepLocksNoLiveRow(t *testing.T) {
	for _, level := range []string{"", "SERIALIZABLE"} {
		t.Run("pool="+level, func(t *testing.T) {
			db := newDB(t, dsn(t), nil)
			pool := db
			if level != "" {
				pool = dbWith(t, map[string]string{"tx_isolation": "'" + level + "'"})
			}
			prefix := sqltest.FreshPrefix()
			t.Cleanup(func() { dropSchema(t, db, prefix) })
			b, err := mysqlsimba.New(ctxT(t), pool, mysqlsimba.WithNamespace(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			live := sqltest.Open(t, b, time.Minute)
			if tok := myAcquire(t, b, live, "live", 0); tok == 0 {
				t.Fatal("live not granted")
			}
			// An expired session with a row to sweep, so the sweep has work.
			dead := sqltest.Open(t, b, 300*time.Millisecond)
			if tok := myAcquire(t, b, dead, "dead", 0); tok == 0 {
				t.Fatal("dead not granted")
			}
			myUntil(t, db, myExpiry(t, db, prefix, dead))

			tx, err := db.BeginTx(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			for _, q := range []string{
				"SELECT COUNT(*) FROM " + prefix + "_leases WHERE name = 'live' FOR UPDATE",
				"SELECT COUNT(*) FROM " + prefix + "_sessions WHERE id = '" + string(live) + "' FOR UPDATE",
			} {
				var n int
				if err := tx.QueryRowContext(ctxT(t), q).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%s: %d, %v", q, n, err)
				}
			}
			ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
			defer cancel()
			if _, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Minute}); err != nil {
				t.Fatalf("Open while a live holder's rows are locked: %v (the sweep waits for live rows)", err)
			}
			var n int
			if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM "+prefix+"_leases WHERE name = 'dead'").Scan(&n); err != nil || n != 0 {
				t.Fatalf("the expired holder's row: %d (%v), want swept", n, err)
			}
		})
	}
}
