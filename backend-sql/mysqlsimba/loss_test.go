package mysqlsimba_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

// On MariaDB/MySQL, acquire's usual path reads only the caller's own
// session row (ADR 0135), so a loss the sessions' rows do not carry yet is
// noticed by whichever of an open, a renewal, an Acquire of a name without
// a row or a takeover comes first; open and renewal then note it for every
// session (lost_v1). Each test below lets exactly one of them come first,
// with nothing else between the loss and the Acquire that must be refused,
// so each fails if that one stops noticing the loss. The RunLoss scenarios
// do not tell them apart: there, an Open of a new session always comes
// first. (The mutation gate's sql-my-* entries, docs/mutation.md.)

// execAll runs each statement on db, in order.
func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// releasedLease opens a session, acquires x and releases it: a lease whose
// row survives a loss of the epoch row, which acquire's fast path grants
// reading nothing but the session's row.
func releasedLease(t *testing.T, b driver.Backend) driver.ID {
	t.Helper()
	id := sqltest.Open(t, b, 10*time.Second)
	tok := sqltest.Acquire(t, b, id, "x")
	if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

// wantQuarantine checks that id's Acquire of name grants nothing and
// answers a quarantine.
func wantQuarantine(t *testing.T, b driver.Backend, id driver.ID, name, after string) {
	t.Helper()
	rep, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{name}})
	if err != nil || rep.Quarantine <= 0 || len(rep.Results) != 1 || rep.Results[0].Token != 0 {
		t.Fatalf("Acquire of %s %s = %+v, %v; want a quarantine and no grant", name, after, rep, err)
	}
}

// TestRenewalNotesALoss: the first renewal after the epoch row went
// missing notes the loss (renew_v2 calls lost_v1), so the released lease is
// refused at once, also to the session that renewed, though no session
// opened, took a new name or took a lease over since.
func TestRenewalNotesALoss(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	id := releasedLease(t, b)
	execAll(t, db, "DELETE FROM "+prefix+"_epoch")
	if _, err := b.Renew(ctxT(t), driver.RenewRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	wantQuarantine(t, b, id, "x", "released before the epoch row went missing, after a renewal")
}

// TestOpenNotesALoss: an Open after the epoch row went missing notes the
// loss for every session (open_v3 calls lost_v1), not only for its own
// row: the session that released x before the loss, which has neither
// renewed nor acquired since, is refused x at once.
func TestOpenNotesALoss(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	id := releasedLease(t, b)
	execAll(t, db, "DELETE FROM "+prefix+"_epoch")
	c := sqltest.Open(t, b, 10*time.Second)
	wantQuarantine(t, b, id, "x", "released before the epoch row went missing, after another session opened")
	wantQuarantine(t, b, c, "x", "by the session opened after the epoch row went missing")
}

// TestTakeoverAfterALossIsRefused: a restore of older rows from a backup
// without the epoch row, in which the holder's session row is missing (it
// opened after the backup): x looks free to take over, while its holder
// still believes. The takeover itself reads the epoch row and markers
// (acquire_v2's check on that path), since no open or renewal noted the
// loss before it: refused, and x keeps its holder's token.
func TestTakeoverAfterALossIsRefused(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	a := sqltest.Open(t, b, 10*time.Second)
	tok := sqltest.Acquire(t, b, a, "x")
	c := sqltest.Open(t, b, 10*time.Second)
	execAll(t, db, "DELETE FROM "+prefix+"_epoch")
	if _, err := db.ExecContext(ctxT(t), "DELETE FROM "+prefix+"_sessions WHERE id = ?", string(a)); err != nil {
		t.Fatal(err)
	}
	wantQuarantine(t, b, c, "x", "whose holder's row was lost with the epoch row")
	var owner string
	var held int
	var got uint64
	if err := db.QueryRowContext(ctxT(t), "SELECT session_id, token, held FROM "+prefix+"_leases WHERE name = 'x'").Scan(&owner, &got, &held); err != nil {
		t.Fatal(err)
	}
	if owner != string(a) || got != tok || held != 1 {
		t.Fatalf("x after the refused takeover: owner %s, token %d, held %d; want %s's, %d, held", owner, got, held, a, tok)
	}
}

// TestNewNameAfterALossIsRefused: the leases lost their rows (their
// marker with them) while the sessions live on, and no session has opened
// or renewed since: an Acquire of a name that now has no row reads the
// epoch row and markers itself (acquire_v2's check on the new-name path),
// so it grants nothing and answers the quarantine.
func TestNewNameAfterALossIsRefused(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	b := newBackend(t, db, prefix)
	id := sqltest.Open(t, b, 10*time.Second)
	execAll(t, db, "TRUNCATE TABLE "+prefix+"_leases")
	wantQuarantine(t, b, id, "y", "after the leases lost their rows")
}
