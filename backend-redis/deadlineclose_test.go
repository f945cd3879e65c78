package redissimba_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// renewCut wraps the backend so the test can make every Renew fail, as
// a network that drops the renewals (or a node paused between two) does,
// while the session stays alive on Redis until its key expires there.
type renewCut struct {
	*redissimba.Backend
	cut atomic.Bool
}

var errRenewCut = errors.New("test: renewal cut")

func (r *renewCut) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if r.cut.Load() {
		return driver.RenewReply{}, errRenewCut
	}
	return r.Backend.Renew(ctx, req)
}

// delayedClaim is a claim whose terms ask for a lock-delay, as
// lock.WithLockDelay's and election.WithLockDelay's handlers do.
type delayedClaim struct {
	*claimRec
	d time.Duration
}

func (c delayedClaim) LockDelay() time.Duration { return c.d }

// TestLockDelayKeptWhenTheLocalDeadlinePasses: a holder whose local
// deadline passed (its renewals did not get through: a pause, a cut
// network) ended its term without a release, which is one of the cases
// the lock-delay covers (driver.AcquireRequest.LockDelay: "its holder's
// deadline passed"). The engine then closes the backend session in the
// background; that Close reaches Redis while the session key is still
// alive (the local deadline comes a margin before Redis's expiry) and
// must not free the name: another session must stay refused for the
// delay, not be granted at once while the paused holder may still write.
func TestLockDelayKeptWhenTheLocalDeadlinePasses(t *testing.T) {
	const delay = 3 * time.Second
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLockDelay(delay))
	rb := &renewCut{Backend: b}
	// A margin of a second: Redis keeps the session a second after the
	// local deadline, so the engine's Close lands while it is alive.
	cfg := deadline.Config{LeaseDuration: 3 * time.Second, RenewInterval: 300 * time.Millisecond, Margin: time.Second}
	ev := make(events, 4096)
	s, err := session.Open(ctxT(t), rb, session.WithConfig(cfg), session.WithListener(ev.listener), session.WithLogger(nil))
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := delayedClaim{claimRec: newClaimRec(), d: delay}
	cl, err := layer.MustOf(s).Claim("x", rec)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	layer.MustOf(s).Do(func() { cl.Want(true) })
	rec.awaitWon(t, 5*time.Second)

	leaseKey := "simba:{" + ns + "}:l:x"
	holder, err := c.HGet(ctxT(t), leaseKey, "s").Result()
	if err != nil {
		t.Fatalf("x's record: %v", err)
	}
	rb.cut.Store(true)
	if reason := rec.awaitLost(t, 5*time.Second); reason != term.DeadlinePassed {
		t.Fatalf("term ended with %v, want DEADLINE_PASSED", reason)
	}
	lost := time.Now()
	// Until the delay has passed since the term ended (a lower bound: Redis
	// ends the session later still), x must stay the old session's record:
	// no session (this node's next one included) may be granted it.
	for time.Since(lost) < delay-500*time.Millisecond {
		owner, err := c.HGet(ctxT(t), leaseKey, "s").Result()
		if err != nil || owner != string(holder) {
			t.Fatalf("%v after the holder's local deadline passed, inside the %v lock-delay: x's owner is %q (%v), want the old session %s", time.Since(lost), delay, owner, err, holder)
		}
		waitTimer(50 * time.Millisecond)
	}
}
