package pgsimba_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

// 100 expired sessions whose leases are in their lock-delay must not keep
// open_v5's sweep from the sessions behind them for the length of the
// delay (found by review "revsql": the sweep took the first 100 expired
// sessions, sweepable or not).
func TestSweepSkipsSessionsInTheirDelay(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b, prefix := delayBackend(t, pool, 30*time.Second)
	var last driver.ID
	for i := 0; i < 100; i++ {
		last = open(t, b, 300*time.Millisecond)
		acquireDelay(t, b, last, fmt.Sprintf("delayed:%d", i), 30*time.Second)
	}
	a := open(t, b, 300*time.Millisecond)
	if tok := acquire(t, b, a, "fresh:x"); tok == 0 {
		t.Fatal("fresh:x not granted")
	}
	untilDB(t, pool, expiresAt(t, pool, prefix, a))
	for i := 0; i < 3; i++ {
		sqltest.Open(t, b, time.Minute)
	}
	var n int
	if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+prefix+"_leases WHERE name = 'fresh:x'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("fresh:x's row is still there after 3 opens: the sweep spent its 100 sessions on those in their 30 s delay")
	}
	_ = last
}
