package mysqlsimba_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// newNotifier returns a Notifier in prefix, shut down when t ends; the
// first one of a prefix also drops its schema then.
func newNotifier(t *testing.T, db *sql.DB, prefix string, drop bool) *mysqlsimba.Notifier {
	t.Helper()
	n, err := mysqlsimba.NewNotifier(ctxT(t), db, mysqlsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatalf("NewNotifier: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Shutdown(context.Background())
		if drop {
			dropSchema(t, db, prefix)
		}
	})
	return n
}

// hintHolder is the connection that holds name's hint, or 0.
func hintHolder(t *testing.T, db *sql.DB, prefix, name string) int64 {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRowContext(ctxT(t), "SELECT IS_USED_LOCK("+mysqlsimba.HintSQL+")", mysqlsimba.HintArg(prefix, name)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id.Int64
}

func subscribe(t *testing.T, n *mysqlsimba.Notifier) <-chan driver.Notice {
	ch := make(chan driver.Notice, 64)
	stop, err := n.Subscribe(func(x driver.Notice) {
		select {
		case ch <- x:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return ch
}

// next is the next notice of name, or a failure when t's context ends.
func next(t *testing.T, ch <-chan driver.Notice, name string) {
	t.Helper()
	for {
		select {
		case n := <-ch:
			if n.Name == name {
				return
			}
		case <-ctxT(t).Done():
			t.Fatalf("no Notice{%q}", name)
		}
	}
}

// A Notifier's grant of one name takes the name's hint before it commits,
// so the Acquire that another Notifier is refused afterwards starts a
// waiter; no notice comes while the lease is held, one comes once its
// release has committed, and the waiter's Acquire then gets the lease
// (ADR 0145).
func TestNotifierHandover(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	h := newNotifier(t, db, prefix, true)
	w := newNotifier(t, db, prefix, false)
	notices := subscribe(t, w)
	hid, wid := sqltest.Open(t, h, time.Minute), sqltest.Open(t, w, time.Minute)
	tok := sqltest.Acquire(t, h, hid, "x")
	if hintHolder(t, db, prefix, "x") == 0 {
		t.Fatal("no connection holds x's hint after a Notifier's grant")
	}
	if got := sqltest.Acquire(t, w, wid, "x"); got != 0 {
		t.Fatalf("the waiter acquired a held lease: token %d", got)
	}
	select {
	case n := <-notices:
		t.Fatalf("%+v while x is held", n)
	default:
	}
	if err := h.Release(ctxT(t), driver.ReleaseRequest{ID: hid, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	next(t, notices, "x")
	if got := sqltest.Acquire(t, w, wid, "x"); got <= tok {
		t.Fatalf("after the notice, the waiter's Acquire = token %d, want above %d: the hint came back before the release committed", got, tok)
	}
}

// The hint is never the lease: when the holder's hint connection ends
// (killed here) the waiter is told, but its Acquire is still refused while
// the holder's session lives; the holder's next call runs on a fresh
// connection and releases; then the lease is the waiter's.
func TestNotifierHintIsNotTheLease(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	h := newNotifier(t, db, prefix, true)
	w := newNotifier(t, db, prefix, false)
	notices := subscribe(t, w)
	hid, wid := sqltest.Open(t, h, time.Minute), sqltest.Open(t, w, time.Minute)
	tok := sqltest.Acquire(t, h, hid, "x")
	if got := sqltest.Acquire(t, w, wid, "x"); got != 0 {
		t.Fatalf("the waiter acquired a held lease: token %d", got)
	}
	conn := hintHolder(t, db, prefix, "x")
	if conn == 0 {
		t.Fatal("no connection holds x's hint")
	}
	if _, err := db.ExecContext(ctxT(t), "KILL CONNECTION ?", conn); err != nil {
		t.Fatal(err)
	}
	next(t, notices, "x")
	if got := sqltest.Acquire(t, w, wid, "x"); got != 0 {
		t.Fatalf("after the holder's hint connection ended, the waiter acquired the live holder's lease: token %d", got)
	}
	if err := h.Release(ctxT(t), driver.ReleaseRequest{ID: hid, Leases: []driver.Lease{{Name: "x", Token: tok}}}); err != nil {
		t.Fatalf("release after the hint connection was killed: %v", err)
	}
	if got := sqltest.Acquire(t, w, wid, "x"); got <= tok {
		t.Fatalf("after the release, the waiter's Acquire = token %d, want above %d", got, tok)
	}
}

// Shutdown gives every hint back: its hint connection is closed, not
// returned to db's pool with the named locks it holds.
func TestNotifierShutdownGivesHintsBack(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	prefix := sqltest.FreshPrefix()
	keep := newNotifier(t, db, prefix, true) // owns the schema's cleanup
	_ = keep
	h, err := mysqlsimba.NewNotifier(ctxT(t), db, mysqlsimba.WithNamespace(prefix))
	if err != nil {
		t.Fatal(err)
	}
	id := sqltest.Open(t, h, time.Minute)
	sqltest.Acquire(t, h, id, "x")
	if hintHolder(t, db, prefix, "x") == 0 {
		t.Fatal("no connection holds x's hint")
	}
	if err := h.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if c := hintHolder(t, db, prefix, "x"); c != 0 {
		t.Fatalf("after Shutdown, connection %d still holds x's hint", c)
	}
}

// A pool too small for the hint connection and a waiter beside the other
// calls is refused before any I/O.
func TestNotifierRefusesASmallPool(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	db.SetMaxOpenConns(3)
	if _, err := mysqlsimba.NewNotifier(ctxT(t), db, mysqlsimba.WithNamespace(sqltest.FreshPrefix()), mysqlsimba.WithoutSchemaCreation()); err == nil || !strings.Contains(err.Error(), "SetMaxOpenConns") {
		t.Fatalf("NewNotifier on a pool of 3: %v, want a refusal naming SetMaxOpenConns", err)
	}
}

// The hint connection outlives a lowered wait_timeout: it is idle between
// calls by nature. Under wait_timeout = 1 the server closed it, which gave
// back the hint of a name still held: the waiter was woken for nothing,
// and the hint was gone for the rest of the term.
func TestHintConnectionOutlivesWaitTimeout(t *testing.T) {
	db := dbWith(t, map[string]string{"wait_timeout": "1"})
	prefix := sqltest.FreshPrefix()
	n := newNotifier(t, db, prefix, true)
	ch := subscribe(t, n)
	holder := sqltest.Open(t, n, 30*time.Second)
	if tok := sqltest.Acquire(t, n, holder, "x"); tok == 0 {
		t.Fatal("x not granted")
	}
	if tok := sqltest.Acquire(t, n, sqltest.Open(t, n, 30*time.Second), "x"); tok != 0 {
		t.Fatalf("x granted twice (%d)", tok)
	}
	time.Sleep(2500 * time.Millisecond) // two of the server's idle timeouts
	select {
	case no := <-ch:
		if no.Name == "x" {
			t.Errorf("a notice of x while it is held: the server closed the idle hint connection")
		}
	default:
	}
	if hintHolder(t, newDB(t, dsn(t), nil), prefix, "x") == 0 {
		t.Error("x's hint is no longer held while x is")
	}
}
