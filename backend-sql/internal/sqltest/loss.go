package sqltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// Loss is one dialect's hooks for the data-loss tests (ADR 0130): the
// namespace's tables lose their rows while sessions hold leases.
type Loss struct {
	// New returns a client of the namespace prefix built with
	// WithMaxLease(maxLease), creating the schema if it is missing. It is
	// shut down when t ends.
	New func(t *testing.T, prefix string, maxLease time.Duration) driver.Backend
	// Exec runs each statement on the server, in order, each on its own.
	Exec func(t *testing.T, stmts ...string)
	// Drop removes the namespace's tables and routines.
	Drop func(t testing.TB, prefix string)
	// RestartIdentity: the dialect has TRUNCATE … RESTART IDENTITY.
	RestartIdentity bool
	// SkipQuarantine replaces the namespace's acquire routine by one that
	// never finds the epoch row missing or quarantined: the planted bug the
	// tests must catch.
	SkipQuarantine func(t *testing.T, prefix string)
}

// lossMaxLease is the cap of the backends under test, and so the length of
// their quarantine: short, since every test waits one out.
const lossMaxLease = time.Second

// tables are the namespace's tables that hold rows (the schema table,
// which only records the version, is left alone by every wipe).
func tables(prefix string) []string {
	return []string{prefix + "_sessions", prefix + "_leases", prefix + "_epoch"}
}

// wipe is one way of losing every row of a namespace.
type wipe struct {
	name string
	sql  func(prefix string) []string
	// restore: the rows are put back from a copy taken after the first
	// term (an old backup that lacks the epoch row); old sessions may then
	// look alive, so their expiry is not checked.
	restore bool
	// sessionsKept: only the leases lose their rows; the sessions live
	// on, and must learn that they own nothing now.
	sessionsKept bool
}

func (l Loss) wipes() []wipe {
	ws := []wipe{
		{name: "Truncate", sql: func(p string) []string {
			var out []string
			for _, t := range tables(p) {
				out = append(out, "TRUNCATE TABLE "+t)
			}
			return out
		}},
		// One table alone: emptied one after the other, the first
		// leaves a window in which the other two still look intact.
		{name: "TruncateSessionsOnly", sql: func(p string) []string {
			return []string{"TRUNCATE TABLE " + p + "_sessions"}
		}},
		{name: "TruncateLeasesOnly", sessionsKept: true, sql: func(p string) []string {
			return []string{"TRUNCATE TABLE " + p + "_leases"}
		}},
		{name: "DeleteEveryRow", sql: func(p string) []string {
			var out []string
			for _, t := range tables(p) {
				out = append(out, "DELETE FROM "+t)
			}
			return out
		}},
		{name: "RestoreOldBackup", restore: true, sql: func(p string) []string {
			out := []string{"DELETE FROM " + p + "_sessions", "DELETE FROM " + p + "_leases", "DELETE FROM " + p + "_epoch"}
			for _, t := range []string{"_sessions", "_leases"} {
				out = append(out, "INSERT INTO "+p+t+" SELECT * FROM "+p+"_bk"+t)
			}
			return out
		}},
	}
	if l.RestartIdentity {
		ws = append(ws, wipe{name: "TruncateRestartIdentity", sql: func(p string) []string {
			return []string{"TRUNCATE TABLE " + p + "_sessions, " + p + "_leases, " + p + "_epoch RESTART IDENTITY"}
		}})
	}
	return ws
}

// backupSQL copies the sessions and leases rows to side tables.
func backupSQL(p string) []string {
	return []string{
		"CREATE TABLE " + p + "_bk_sessions AS SELECT * FROM " + p + "_sessions",
		"CREATE TABLE " + p + "_bk_leases AS SELECT * FROM " + p + "_leases",
	}
}

// RunLoss runs the data-loss tests against l.
func RunLoss(t *testing.T, l Loss) {
	for _, w := range l.wipes() {
		t.Run("QuarantineAfter"+w.name, func(t *testing.T) {
			t.Parallel()
			if err := l.scenario(t, w, false); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("QuarantineSkippedIsCaught", func(t *testing.T) {
		t.Parallel()
		err := l.scenario(t, l.wipes()[0], true)
		if err == nil {
			t.Fatal("with an acquire routine that skips the epoch check, the data-loss scenario passed: it cannot catch a missing quarantine")
		}
		t.Logf("the planted bug was caught: %v", err)
	})
	t.Run("NewNamespaceNotQuarantined", func(t *testing.T) { l.newNamespace(t) })
	t.Run("EpochRowDeletedQuarantinesKeepingHolders", func(t *testing.T) { l.epochDeleted(t) })
	t.Run("MaxLeaseCapsGrants", func(t *testing.T) { l.maxLeaseCaps(t) })
}

func (l Loss) namespace(t *testing.T) string {
	prefix := FreshPrefix()
	t.Cleanup(func() {
		l.Drop(t, prefix)
		l.Exec(t, "DROP TABLE IF EXISTS "+prefix+"_bk_sessions", "DROP TABLE IF EXISTS "+prefix+"_bk_leases")
	})
	return prefix
}

func acquireReply(ctx context.Context, b driver.Backend, id driver.ID, names ...string) (driver.AcquireReply, error) {
	rep, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: names})
	if err == nil && len(rep.Results) != len(names) {
		err = fmt.Errorf("%d results for %d names", len(rep.Results), len(names))
	}
	return rep, err
}

func tokens(rep driver.AcquireReply) []uint64 {
	out := make([]uint64, len(rep.Results))
	for i, r := range rep.Results {
		out[i] = r.Token
	}
	return out
}

// scenario: a session holds x (its second term) and y; the rows are lost
// as w says; then the promises of ADR 0130, the first broken one returned:
// the old session answers expired; a new session opens; its Acquire grants
// nothing and answers a quarantine of about one MaxLease, which counts
// down; once it has passed, Acquire grants with tokens above every earlier
// one. skip plants the bug (no epoch check) before the loss.
func (l Loss) scenario(t *testing.T, w wipe, skip bool) error {
	prefix := l.namespace(t)
	b := l.New(t, prefix, lossMaxLease)
	ctx := Ctx(t)
	a := Open(t, b, lossMaxLease)
	t1 := Acquire(t, b, a, "x")
	if w.restore {
		l.Exec(t, backupSQL(prefix)...)
	}
	if err := b.Release(ctx, driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: t1}}}); err != nil {
		t.Fatal(err)
	}
	tx, ty := Acquire(t, b, a, "x"), Acquire(t, b, a, "y")
	if tx <= t1 || ty == 0 {
		t.Fatalf("tokens before the loss: x %d then %d, y %d", t1, tx, ty)
	}
	r0, err := b.Renew(ctx, driver.RenewRequest{ID: a})
	if err != nil || len(r0.Leases) != 2 {
		t.Fatalf("renewal before the loss: %+v, %v; want x and y", r0, err)
	}
	if skip {
		l.SkipQuarantine(t, prefix)
	}
	l.Exec(t, w.sql(prefix)...)
	lost := time.Now()
	c := l.New(t, prefix, lossMaxLease) // another process
	rc, err := c.Open(ctx, driver.OpenRequest{LeaseDuration: lossMaxLease})
	if err != nil {
		return fmt.Errorf("Open after the loss: %v; Open keeps working during the quarantine", err)
	}
	// The quarantine starts between these two readings of the clock;
	// comparing each later call's send with detected, and its reply with
	// asked, leaves the calls' own latency out of the checks.
	asked := time.Now()
	rep, err := acquireReply(ctx, c, rc.ID, "x", "y")
	detected := time.Now()
	switch {
	case err != nil:
		return fmt.Errorf("first Acquire after the loss: %v, want a quarantine reply", err)
	case rep.Quarantine <= 0:
		return fmt.Errorf("first Acquire after the loss: tokens %v and no quarantine: two holders are possible while the old ones still believe", tokens(rep))
	case rep.Quarantine > lossMaxLease:
		return fmt.Errorf("first Acquire after the loss: Quarantine = %v, more than MaxLease %v", rep.Quarantine, lossMaxLease)
	case rep.Quarantine < lossMaxLease-time.Since(lost)-100*time.Millisecond:
		return fmt.Errorf("first Acquire after the loss: Quarantine = %v, want about MaxLease %v from the detection", rep.Quarantine, lossMaxLease)
	case slices.ContainsFunc(rep.Results, func(r driver.AcquireResult) bool { return r.Token != 0 }):
		return fmt.Errorf("first Acquire after the loss: Quarantine %v with tokens %v: a quarantine grants nothing", rep.Quarantine, tokens(rep))
	}
	q := rep.Quarantine
	switch {
	case w.sessionsKept:
		// It lives on, but its next renewal says it owns nothing now,
		// whatever version it knew: its engine ends both terms.
		r, err := b.Renew(ctx, driver.RenewRequest{ID: a, KnownVersion: r0.Version})
		if err != nil || !r.Full || len(r.Leases) != 0 {
			return fmt.Errorf("renewal of a session whose leases were lost, once noticed: %+v, %v; want the full list, empty", r, err)
		}
	case !w.restore:
		if _, err := b.Renew(ctx, driver.RenewRequest{ID: a}); !errors.Is(err, driver.ErrExpired) {
			return fmt.Errorf("renewal of a session whose rows were lost: err = %v, want ErrExpired", err)
		}
		if _, err := acquireReply(ctx, b, a, "z"); !errors.Is(err, driver.ErrExpired) {
			return fmt.Errorf("Acquire by a session whose rows were lost, during the quarantine: err = %v, want ErrExpired", err)
		}
	}
	for {
		if _, err := c.Renew(ctx, driver.RenewRequest{ID: rc.ID}); err != nil {
			return fmt.Errorf("renewal during the quarantine: %v", err)
		}
		sent := time.Since(detected)
		rep, err := acquireReply(ctx, c, rc.ID, "x", "y")
		since := time.Since(asked)
		switch {
		case err != nil:
			return fmt.Errorf("Acquire %v into the quarantine: %v", since, err)
		case rep.Quarantine > 0 && rep.Quarantine > q-sent+20*time.Millisecond:
			return fmt.Errorf("Acquire %v into a quarantine of %v: Quarantine = %v; it counts down from the detection, never restarts", sent, q, rep.Quarantine)
		case rep.Quarantine > 0:
		case since < q-20*time.Millisecond:
			return fmt.Errorf("Acquire %v into a quarantine of %v: granted %v before it ended", since, q, tokens(rep))
		case rep.Results[0].Token == 0 && rep.Results[1].Token == 0:
			// Nothing granted and no quarantine: the routine saw the
			// quarantine on and then, looking again, over (the MySQL
			// routine looks twice, a transaction apart). Try again; the
			// bound below ends a routine that never grants.
		case rep.Results[0].Token <= tx || rep.Results[1].Token <= ty:
			return fmt.Errorf("Acquire after the quarantine: tokens %v, want above %d and %d: tokens never go backwards", tokens(rep), tx, ty)
		default:
			return nil
		}
		if since > q+5*time.Second {
			return fmt.Errorf("Acquire %v after a quarantine of %v: still %v", since, q, rep.Quarantine)
		}
		<-time.After(50 * time.Millisecond) // the database's clock must pass the quarantine
	}
}

// A namespace the backend created grants at its first Acquire: tables that
// did not exist held no leases.
func (l Loss) newNamespace(t *testing.T) {
	prefix := l.namespace(t)
	b := l.New(t, prefix, lossMaxLease)
	id := Open(t, b, lossMaxLease)
	rep, err := acquireReply(Ctx(t), b, id, "x")
	if err != nil || rep.Quarantine != 0 || rep.Results[0].Token == 0 {
		t.Fatalf("first Acquire in a new namespace = %+v, %v; want a grant and no quarantine", rep, err)
	}
}

// Deleting the epoch row alone (what an operator does after restoring a
// backup that has it) quarantines the namespace: no new grant, while the
// leases held go on being held and renewed.
func (l Loss) epochDeleted(t *testing.T) {
	prefix := l.namespace(t)
	b := l.New(t, prefix, lossMaxLease)
	a := Open(t, b, lossMaxLease)
	tok := Acquire(t, b, a, "x")
	l.Exec(t, "DELETE FROM "+prefix+"_epoch")
	c := Open(t, b, lossMaxLease)
	rep, err := acquireReply(Ctx(t), b, c, "y")
	if err != nil || rep.Quarantine <= 0 || rep.Results[0].Token != 0 {
		t.Fatalf("Acquire after the epoch row was deleted = %+v, %v; want a quarantine", rep, err)
	}
	r, err := b.Renew(Ctx(t), driver.RenewRequest{ID: a})
	if err != nil || !r.Full || len(r.Leases) != 1 || r.Leases[0] != (driver.Lease{Name: "x", Token: tok}) {
		t.Fatalf("Renew of the holder during the quarantine = %+v, %v; want x still held under %d", r, err, tok)
	}
	// A lease released during the quarantine is not granted either (its
	// holder's view may be the stale one), also not to a session opened
	// during the quarantine.
	if err := b.Release(Ctx(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []driver.ID{a, c, Open(t, b, lossMaxLease)} {
		rep, err := acquireReply(Ctx(t), b, id, "x")
		if err != nil || rep.Quarantine <= 0 || rep.Results[0].Token != 0 {
			t.Fatalf("Acquire of a lease released during the quarantine = %+v, %v; want a quarantine", rep, err)
		}
	}
}

// Every session's lease is capped at MaxLease, whatever it asked for.
func (l Loss) maxLeaseCaps(t *testing.T) {
	prefix := l.namespace(t)
	b := l.New(t, prefix, lossMaxLease)
	rep, err := b.Open(Ctx(t), driver.OpenRequest{LeaseDuration: time.Hour})
	if err != nil || rep.Remaining <= 0 || rep.Remaining > lossMaxLease {
		t.Fatalf("Open(1h) with MaxLease %v = %+v, %v; want a grant of at most MaxLease", lossMaxLease, rep, err)
	}
	r, err := b.Renew(Ctx(t), driver.RenewRequest{ID: rep.ID})
	if err != nil || r.Remaining <= 0 || r.Remaining > lossMaxLease {
		t.Fatalf("Renew with MaxLease %v = %+v, %v; want at most MaxLease", lossMaxLease, r, err)
	}
}

// KitFails runs the test t in a child test binary, with env set, limited
// to its subtest named subtest, and checks that the subtest fails there.
// The child (env set) runs the conformance kit on a backend with a
// planted bug: this proves the kit can catch it.
func KitFails(t *testing.T, env, subtest string) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$/^"+subtest+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the kit on the planted bug: err = %v, want a failing test binary; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- FAIL: "+t.Name()+"/"+subtest) {
		t.Fatalf("the kit on the planted bug did not fail %s; output:\n%s", subtest, out)
	}
}
