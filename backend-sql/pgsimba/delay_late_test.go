package pgsimba_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// A session that expired on the server owes its names their lock-delay
// from its expiry: a Close or a Release that arrives after the expiry
// (the paused holder woke up: its engine closes a session whose deadline
// passed, its code releases what it held) does not cut the delay short,
// since the holder that wakes up may be writing right then (found by
// review "revsql": close_v4 and release_v4 deleted the rows, and the
// waiting candidate got the name at once).
func TestLateCloseOrReleaseKeepsTheDelay(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b, prefix := delayBackend(t, pool, 3*time.Second)
	const delay = 2 * time.Second
	other := open(t, b, time.Minute)
	for _, how := range []string{"Close", "Release"} {
		t.Run(how, func(t *testing.T) {
			name := "late:" + how
			a := open(t, b, 300*time.Millisecond)
			tok := acquireDelay(t, b, a, name, delay)
			exp := expiresAt(t, pool, prefix, a)
			untilDB(t, pool, exp)
			if got := acquire(t, b, other, name); got != 0 {
				t.Fatalf("granted %d right after the expiry", got)
			}
			if how == "Close" {
				_ = b.Close(ctxT(t), a) // the engine's close of a session whose deadline passed
			} else {
				_ = b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: name, Token: tok}}})
			}
			for {
				got := acquire(t, b, other, name)
				now := dbNow(t, pool)
				if got != 0 {
					if now.Before(exp.Add(delay)) {
						t.Fatalf("granted %v after the expiry, inside the delay %v: the late %s cut it short", now.Sub(exp), delay, how)
					}
					if got <= tok {
						t.Fatalf("granted %d after the delay, want above %d", got, tok)
					}
					return
				}
				if now.After(exp.Add(delay + 5*time.Second)) {
					t.Fatalf("still refused %v after the expiry", now.Sub(exp))
				}
				<-time.After(50 * time.Millisecond)
			}
		})
	}
}
