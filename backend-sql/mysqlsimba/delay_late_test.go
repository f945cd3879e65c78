package mysqlsimba_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

// As PostgreSQL's: a Close or a Release that arrives after the session
// expired on the server (the paused holder woke up) does not cut the
// lock-delay short (found by review "revsql": close_v3 and release_v4
// deleted the rows, and the waiting candidate got the name at once).
func TestLateCloseOrReleaseKeepsTheDelay(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	b, prefix := newBackendWith(t, db, mysqlsimba.WithMaxLockDelay(3*time.Second))
	const delay = 2 * time.Second
	other := sqltest.Open(t, b, time.Minute)
	for _, how := range []string{"Close", "Release"} {
		t.Run(how, func(t *testing.T) {
			name := "late:" + how
			a := sqltest.Open(t, b, 300*time.Millisecond)
			tok := myAcquire(t, b, a, name, delay)
			exp := myExpiry(t, db, prefix, a)
			myUntil(t, db, exp)
			if got := myAcquire(t, b, other, name, 0); got != 0 {
				t.Fatalf("granted %d right after the expiry", got)
			}
			if how == "Close" {
				_ = b.Close(ctxT(t), a) // the engine's close of a session whose deadline passed
			} else {
				_ = b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: name, Token: tok}}})
			}
			for {
				got := myAcquire(t, b, other, name, 0)
				now := myNow(t, db)
				if got != 0 {
					if now < exp+delay.Microseconds() {
						t.Fatalf("granted %dµs after the expiry, inside the delay %v: the late %s cut it short", now-exp, delay, how)
					}
					if got <= tok {
						t.Fatalf("granted %d after the delay, want above %d", got, tok)
					}
					return
				}
				if now > exp+(delay+5*time.Second).Microseconds() {
					t.Fatalf("still refused %dµs after the expiry", now-exp)
				}
				<-time.After(50 * time.Millisecond)
			}
		})
	}
}
