package mysqlsimba

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/session/driver"
)

// The hint arguments of acquire_v3 and release_v3 (ADR 0145).
const (
	hintReport = 2 // answer "w" for a name refused while its hint is held
	hintTake   = 3 // that, and take the hint of the one name granted
	hintGive   = 1 // release_v3: give the one name's hint back after the commit
)

// maxWaiters bounds the connections a Notifier keeps blocked in GET_LOCK,
// one per waited name: the names past it are found by polling only.
const maxWaiters = 8

// minPool is the least MaxOpenConnections a Notifier accepts (0, no
// limit, too). A waiter starts only while the pool keeps two connections
// beyond those in use for the other calls.
const minPool = 4

// Notifier is a [Backend] that also pushes release notices
// ([driver.Broadcaster]) through MariaDB's named locks (ADR 0145), so that
// a candidate waiting for a lease hears of its release at once instead of
// at its next poll.
//
// Every lease a Notifier grants to one name (the usual acquisition) comes
// with a wake-up hint: the named lock simba:<sha1 of namespace:name>,
// taken in the granting transaction on the Notifier's hint connection and
// given back once the release has committed (or the session is closed, or
// the connection ends). An Acquire refused a name whose hint another
// connection holds starts a waiter: a connection blocked in GET_LOCK on
// that hint, which delivers a Notice when it is given back. The hint is
// never the lease: only the leases table grants, and a lost or spurious
// hint only delays a candidate to its next poll or costs it an Acquire.
//
// It takes connections from db's pool: one for the hint connection, held
// until [Notifier.Shutdown], and one per waited name while it waits (at
// most 8; names past that are polled for). Its acquisitions of one name
// and releases of one lease run on the hint connection, one at a time.
// Processes of a namespace that use New instead of NewNotifier take no
// hints, so candidates waiting for their leases poll. Notices need MariaDB
// (SET STATEMENT); on MySQL a Notifier only polls.
type Notifier struct {
	*Backend
}

var (
	_ driver.Backend     = (*Notifier)(nil)
	_ driver.Inspector   = (*Notifier)(nil)
	_ driver.Broadcaster = (*Notifier)(nil)
)

// NewNotifier is [New] for a [Notifier].
func NewNotifier(ctx context.Context, db *sql.DB, opts ...Option) (*Notifier, error) {
	b, err := New(ctx, db, opts...)
	if err != nil {
		return nil, err
	}
	if m := db.Stats().MaxOpenConnections; m > 0 && m < minPool {
		return nil, fmt.Errorf("mysqlsimba: NewNotifier: db allows %d open connections, want at least %d (the hint connection is held, and waiters block in GET_LOCK): SetMaxOpenConns", m, minPool)
	}
	nctx, cancel := context.WithCancel(context.Background())
	b.notify = &notifier{b: b, ctx: nctx, cancel: cancel, hintSem: make(chan struct{}, 1), waiting: map[string]bool{}, hinted: map[string]map[string]bool{}, subs: map[int]func(driver.Notice){}}
	return &Notifier{b}, nil
}

// Subscribe implements [driver.Broadcaster]: fn receives a Notice for a
// name whose hint a waiter of this Notifier was given back, that is a name
// an Acquire of this Notifier was refused while the name's holder was a
// Notifier's.
func (n *Notifier) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	nt := n.notify
	nt.subMu.Lock()
	defer nt.subMu.Unlock()
	nt.nextSub++
	id := nt.nextSub
	nt.subs[id] = fn
	var once sync.Once
	return func() {
		once.Do(func() {
			nt.subMu.Lock() // waits for a delivery in progress
			delete(nt.subs, id)
			nt.subMu.Unlock()
		})
	}, nil
}

// Shutdown stops the waiters, gives back every hint (the hint connection
// is closed, not returned to the pool) and shuts the Backend down.
func (n *Notifier) Shutdown(ctx context.Context) error {
	nt := n.notify
	nt.mu.Lock()
	nt.closed = true
	nt.mu.Unlock()
	nt.cancel()
	nt.wg.Wait()
	if err := nt.lockHint(ctx); err != nil {
		return err
	}
	if nt.hintConn != nil {
		// Given back before Shutdown returns: closing the connection
		// alone gives them back only when the server has noticed the
		// disconnect, after Shutdown returned (a clean-clone CI run saw
		// the hint still held). An error (a server before MariaDB 10.5 or
		// MySQL 5.7, a broken connection) leaves that to the disconnect.
		_, _ = nt.hintConn.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()")
	}
	nt.dropHintConn()
	nt.unlockHint()
	return n.Backend.Shutdown(ctx)
}

// notifier is a Notifier's state.
type notifier struct {
	b      *Backend
	ctx    context.Context // ends at Shutdown: the waiters' calls
	cancel context.CancelFunc
	wg     sync.WaitGroup // the waiters

	hintSem  chan struct{} // held while the hint connection is used: one call at a time
	hintConn *sql.Conn
	hintStmt map[int64]*boundStmts // by bound, prepared on hintConn
	giveStmt *sql.Stmt             // DO RELEASE_LOCK(hint), on hintConn

	mu      sync.Mutex
	closed  bool
	waiting map[string]bool            // names with a waiter
	hinted  map[string]map[string]bool // session → names whose hint it may hold

	subMu   sync.RWMutex
	subs    map[int]func(driver.Notice)
	nextSub int
}

// hintSQL is name's wake-up hint as the routines write it, for the
// argument hintArg(name): simba:<sha1 of "<database>/<p>:<name>">, 46
// characters (named locks take 64). DATABASE() is the connection's, where
// the routines are called unqualified.
const hintSQL = "CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/', ?)))"

func (nt *notifier) hintArg(name string) string { return nt.b.prefix + ":" + name }

// onHintConn runs f with the hint connection's statements for a bound of
// n seconds. A connection that failed otherwise than with a server error
// is closed (the server gives its hints back) and replaced at the next
// call.
func (nt *notifier) onHintConn(ctx context.Context, n int64, f func(*boundStmts) error) error {
	if err := nt.lockHint(ctx); err != nil {
		return err
	}
	defer nt.unlockHint()
	if nt.hintConn == nil {
		c, err := nt.newHintConn(ctx)
		if err != nil {
			return err
		}
		nt.hintConn, nt.hintStmt = c, map[int64]*boundStmts{}
	}
	bs := nt.hintStmt[n]
	if bs == nil {
		var err error
		if bs, err = nt.b.q.prepareBound(ctx, nt.hintConn, n, hintTake, hintGive); err != nil {
			nt.dropIfBroken(err)
			return err
		}
		nt.hintStmt[n] = bs
	}
	err := f(bs)
	if nt.dropIfBroken(err) && ctx.Err() == nil {
		// The connection broke (its server side killed, say) and is
		// gone, with its hints. Once more on a fresh one: acquire and
		// release of one name are safe to run twice (a session's second
		// acquisition of what it holds answers its token, a second
		// release is a no-op). The name's hint is lost for this term.
		c, cerr := nt.newHintConn(ctx)
		if cerr != nil {
			return err
		}
		nt.hintConn, nt.hintStmt = c, map[int64]*boundStmts{}
		if bs, err = nt.b.q.prepareBound(ctx, nt.hintConn, n, hintTake, hintGive); err != nil {
			nt.dropIfBroken(err)
			return err
		}
		nt.hintStmt[n] = bs
		err = f(bs)
		nt.dropIfBroken(err)
	}
	return err
}

// hintWaitTimeout is the hint connection's wait_timeout: the most MySQL
// and MariaDB accept (a year). The connection is idle between calls by
// nature; under the pool's wait_timeout (often lowered by operators) the
// server closed it, which gave back every hint while their names were
// still held: each waiter was woken for nothing, and the hints were lost
// for the rest of their terms.
const hintWaitTimeout = 31536000

// newHintConn takes a connection out of the pool for the hints, with its
// own wait_timeout. It never goes back to the pool (dropHintConn).
func (nt *notifier) newHintConn(ctx context.Context) (*sql.Conn, error) {
	c, err := nt.b.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.ExecContext(ctx, "SET SESSION wait_timeout = ?", hintWaitTimeout); err != nil {
		_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// lockHint takes the hint connection, or gives up when ctx ends (a call
// may hold it for up to its lock-wait bound).
func (nt *notifier) lockHint(ctx context.Context) error {
	select {
	case nt.hintSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (nt *notifier) unlockHint() { <-nt.hintSem }

// dropIfBroken closes the hint connection after an error that was not the
// server's answer (the call may have been cut off half way), and reports
// whether it did.
func (nt *notifier) dropIfBroken(err error) bool {
	var me *mysql.MySQLError
	if err != nil && !errors.Is(err, sql.ErrNoRows) && !errors.As(err, &me) {
		nt.dropHintConn()
		return true
	}
	return false
}

// dropHintConn closes the hint connection for good: returning it to the
// pool would leave its named locks held by whichever call used it next.
// the hint connection held (lockHint).
func (nt *notifier) dropHintConn() {
	if nt.hintConn == nil {
		return
	}
	for _, bs := range nt.hintStmt {
		bs.close()
	}
	if nt.giveStmt != nil {
		nt.giveStmt.Close()
	}
	_ = nt.hintConn.Raw(func(any) error { return sqldriver.ErrBadConn }) // discard it
	_ = nt.hintConn.Close()
	nt.hintConn, nt.hintStmt, nt.giveStmt = nil, nil, nil
	nt.mu.Lock()
	clear(nt.hinted) // the server gave them back with the connection
	nt.mu.Unlock()
}

// granted notes the hint an acquisition of one name on the hint
// connection may have taken (out is its answer).
func (nt *notifier) granted(session, name, out string) {
	if out == "" || out == "0" || out == "w" || out[0] == 'q' {
		return
	}
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.hinted[session] == nil {
		nt.hinted[session] = map[string]bool{}
	}
	nt.hinted[session][name] = true
}

// released forgets the hint that release_v3 gave back.
func (nt *notifier) released(session, name string) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	delete(nt.hinted[session], name)
	if len(nt.hinted[session]) == 0 {
		delete(nt.hinted, session)
	}
}

// giveBack gives back name's hint after its lease was freed by a call
// through the pool (a release of several leases), if session may hold it.
func (nt *notifier) giveBack(ctx context.Context, session, name string) {
	nt.mu.Lock()
	held := nt.hinted[session][name]
	nt.mu.Unlock()
	if held {
		nt.give(ctx, []string{name})
		nt.released(session, name)
	}
}

// keepOnly gives back the hints of session's names that a renewal says it
// no longer owns.
func (nt *notifier) keepOnly(ctx context.Context, session string, owned []driver.Lease) {
	nt.mu.Lock()
	var gone []string
	for name := range nt.hinted[session] {
		if !slices.ContainsFunc(owned, func(l driver.Lease) bool { return l.Name == name }) {
			gone = append(gone, name)
			delete(nt.hinted[session], name)
		}
	}
	nt.mu.Unlock()
	if len(gone) > 0 {
		nt.give(ctx, gone)
	}
}

// forget gives back the hints of a closed or expired session.
func (nt *notifier) forget(ctx context.Context, session string) {
	nt.mu.Lock()
	var names []string
	for name := range nt.hinted[session] {
		names = append(names, name)
	}
	delete(nt.hinted, session)
	nt.mu.Unlock()
	if len(names) > 0 {
		nt.give(ctx, names)
	}
}

// give releases the hints of names on the hint connection (a no-op for
// one it does not hold). Best effort: a failure drops the connection,
// which gives every hint back.
func (nt *notifier) give(ctx context.Context, names []string) {
	if nt.lockHint(ctx) != nil {
		return // the hints stay until the connection ends: waiters poll
	}
	defer nt.unlockHint()
	if nt.hintConn == nil {
		return
	}
	if nt.giveStmt == nil {
		st, err := nt.hintConn.PrepareContext(ctx, "DO RELEASE_LOCK("+hintSQL+")")
		if err != nil {
			nt.dropHintConn()
			return
		}
		nt.giveStmt = st
	}
	for _, name := range names {
		if _, err := nt.giveStmt.ExecContext(ctx, nt.hintArg(name)); err != nil {
			nt.dropHintConn()
			return
		}
	}
}

// wait starts a waiter for name, unless one waits already, the Notifier
// is shut down, or maxWaiters wait.
func (nt *notifier) wait(name string) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.closed || nt.waiting[name] || len(nt.waiting) >= maxWaiters {
		return
	}
	if st := nt.b.db.Stats(); st.MaxOpenConnections > 0 && st.InUse+2 >= st.MaxOpenConnections {
		return // no room in the user's pool: poll
	}
	nt.waiting[name] = true
	nt.wg.Add(1)
	go nt.waiter(name)
}

// waiter blocks in GET_LOCK on name's hint, on a connection of its own,
// for up to one maximum lease; when it gets the hint (its holder gave it
// back, or the holder's connection ended) it gives it back at once and
// delivers a Notice. The acquire that started it found the hint held by
// another connection, so getting it at once means it was given back since.
// Its connection is then closed, not pooled, so that no named lock can
// stay with a pooled connection.
func (nt *notifier) waiter(name string) {
	defer nt.wg.Done()
	defer func() {
		nt.mu.Lock()
		delete(nt.waiting, name)
		nt.mu.Unlock()
	}()
	ctx := nt.ctx
	c, err := nt.b.db.Conn(ctx)
	if err != nil {
		return
	}
	defer func() {
		_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
		_ = c.Close()
	}()
	arg := nt.hintArg(name)
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, "SELECT GET_LOCK("+hintSQL+", ?)", arg, max(1, int64(nt.b.core.MaxLease.Seconds()))).Scan(&got); err != nil || got.Int64 != 1 {
		return // shut down, or the hint was not given back in time
	}
	if _, err := c.ExecContext(ctx, "DO RELEASE_LOCK("+hintSQL+")", arg); err != nil {
		return // the connection is closed below, which gives the hint back
	}
	nt.deliver(driver.Notice{Name: name})
}

// deliver calls every subscriber's fn.
func (nt *notifier) deliver(n driver.Notice) {
	nt.subMu.RLock()
	defer nt.subMu.RUnlock()
	for _, fn := range nt.subs {
		fn(n)
	}
}
