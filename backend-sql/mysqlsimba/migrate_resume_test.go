package mysqlsimba_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
)

// MySQL's DDL commits statement by statement: a migration to version 5
// interrupted after any of its statements (the process killed, a lock
// wait timed out) must complete when the next process starts (found by
// review "revsql").
func TestMigrationToVersion5Resumes(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	all, err := mysqlsimba.Migration("probe", 4)
	if err != nil {
		t.Fatal(err)
	}
	for cut := range all {
		if !strings.Contains(all[cut], "ALTER TABLE") {
			continue
		}
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { dropSchema(t, db, prefix) })
		stmts, err := mysqlsimba.SchemaAt(prefix, 4)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, "INSERT INTO "+prefix+"_epoch VALUES (1, UTC_TIMESTAMP(6))")
		part, err := mysqlsimba.Migration(prefix, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(stmts, part[:cut+1]...) {
			if _, err := db.ExecContext(ctxT(t), s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		b, err := mysqlsimba.New(ctxT(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second))
		if err != nil {
			t.Errorf("New after a migration cut after %q: %v", firstLine(all[cut]), err)
			continue
		}
		_ = b.Shutdown(context.Background())
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// An older process's grant between any two of the migration's statements
// (each commits on its own) is either refused or leaves a row the rest
// of the migration accepts: the migration completes while that process
// holds the name, and its release frees the name for a higher token
// (found by review "revsql": a grant after legacy's default became 0 and
// before the CHECK was a held row the CHECK could not be added over, so
// New failed for as long as the older holder kept the name).
func TestMigrationToVersion5WithAnOlderGrantInBetween(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	all, err := mysqlsimba.Migration("probe", 4)
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut <= len(all); cut++ {
		prefix := sqltest.FreshPrefix()
		t.Cleanup(func() { dropSchema(t, db, prefix) })
		stmts, err := mysqlsimba.SchemaAt(prefix, 4)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, "INSERT INTO "+prefix+"_epoch VALUES (1, UTC_TIMESTAMP(6))")
		part, err := mysqlsimba.Migration(prefix, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(stmts, part[:cut]...) {
			if _, err := db.ExecContext(ctxT(t), s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		old := strings.Repeat("cd", 16)
		if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_open_v3(?, 60000000, '', 1000000, 5000)", old); err != nil {
			t.Fatal(err)
		}
		var out string
		granted := db.QueryRowContext(ctxT(t), "CALL "+prefix+"_acquire_v2(?, 'old:leader', 1000000, 5000)", old).Scan(&out) == nil && out != "0"
		b, err := mysqlsimba.New(ctxT(t), db, mysqlsimba.WithNamespace(prefix), mysqlsimba.WithMaxLease(time.Second))
		if err != nil {
			t.Errorf("New while an older process holds a name it took after %d of the migration's statements: %v", cut, err)
			continue
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		if !granted || cut >= len(all) || !strings.Contains(all[cut], "ADD CONSTRAINT") {
			continue
		}
		// Just before the CHECK: the older holder keeps it; its release
		// frees it for a higher token.
		var oldTok uint64
		if err := db.QueryRowContext(ctxT(t), "SELECT token FROM "+prefix+"_leases WHERE name = 'old:leader'").Scan(&oldTok); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_release_v2(?, 'old:leader', ?, 5000)", old, oldTok); err != nil {
			t.Fatal(err)
		}
		id := sqltest.Open(t, b, time.Minute)
		deadline := time.Now().Add(10 * time.Second)
		for {
			tok := myAcquire(t, b, id, "old:leader", 0)
			if tok > oldTok {
				break
			}
			if tok != 0 {
				t.Fatalf("old:leader granted %d, not above the older grant's %d", tok, oldTok)
			}
			if time.Now().After(deadline) {
				t.Fatal("old:leader never granted")
			}
			<-time.After(50 * time.Millisecond) // the upgrade's quarantine (1s)
		}
	}
}
