package backendtest

import (
	"context"
	"errors"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// sessionCases check the life of a session: open, renew, expire, close.
var sessionCases = []testCase{
	{
		name:    "OpenGivesFreshSession",
		promise: "Open gives a new session ID and a positive Remaining of at most the requested lease",
		f: func(e *env) {
			a, b := e.open(), e.open()
			if a.id == b.id {
				e.errorf("two Opens returned the same ID %s", a.id)
			}
		},
	},
	{
		name:    "IDsNeverReused",
		promise: "a session ID is never handed out twice",
		f: func(e *env) {
			const n = 40
			b := e.client()
			seen := map[driver.ID]bool{}
			for range n {
				s := e.openOn(b)
				if seen[s.id] {
					e.fatalf("Open returned ID %s a second time", s.id)
				}
				seen[s.id] = true
				if len(seen)%2 == 0 {
					s.close() // a closed session's ID is not reused either
				}
			}
		},
	},
	{
		name:    "RenewRestoresRemaining",
		waits:   true,
		promise: "a renewal extends the session by its lease, measured by the backend's clock, so a session renewed in time outlives its first lease",
		f: func(e *env) {
			s := e.open()
			r0 := s.opened.Remaining
			step := r0 / 2
			// Renew every half grant for longer than the lease plus grace:
			// only renewals that really extend the session keep it alive.
			for waited := time.Duration(0); waited <= e.cfg.Lease+e.cfg.ExpiryGrace; waited += step {
				e.wait(step)
				r := s.renew(0)
				if r.Remaining < r0*3/4 {
					e.errorf("after %v, Renew: Remaining = %v, want about the %v granted at Open: renewal restores the lease",
						waited+step, r.Remaining, r0)
				}
			}
		},
	},
	{
		name:    "ExpiredSessionStaysExpired",
		waits:   true,
		promise: "a session not renewed for its lease expires, and then answers ErrExpired to Renew and Acquire forever, also after later Opens",
		f: func(e *env) {
			a := e.open()
			a.mustAcquire("held")
			e.waitExpiry()
			expired := func(when string) {
				e.t.Helper()
				if _, err := a.b.Renew(e.ctx(), driver.RenewRequest{ID: a.id}); !errors.Is(err, driver.ErrExpired) {
					e.errorf("%s: Renew of a session past its lease: err = %v, want ErrExpired", when, err)
				}
				reply, err := a.b.Acquire(e.ctx(), driver.AcquireRequest{ID: a.id, Names: []string{"other"}})
				if !errors.Is(err, driver.ErrExpired) {
					e.errorf("%s: Acquire for a session past its lease: err = %v, results %v, want ErrExpired", when, err, reply.Results)
				}
			}
			expired("after the lease")
			b := e.open()
			if b.id == a.id {
				e.errorf("Open after expiry returned the expired ID %s", a.id)
			}
			if tok := b.acquire("other"); tok == 0 {
				e.errorf("Acquire(%q) refused: the expired session must not have acquired it", "other")
			}
			expired("after a later Open")
			if err := a.b.Close(e.ctx(), a.id); err != nil {
				e.errorf("Close of an expired session: %v, want nil", err)
			}
			expired("after Close")
		},
	},
	{
		name:    "CloseReleasesEverything",
		promise: "Close ends the session at once and frees every lease it owns; the session then answers ErrExpired or ErrClosed, and closing it again is not an error",
		f: func(e *env) {
			a, b := e.open(), e.open()
			tx, ty := a.mustAcquire("x"), a.mustAcquire("y")
			a.close()
			rs := b.acquireAll("x", "y")
			if rs[0].Token <= tx || rs[1].Token <= ty {
				e.errorf("Acquire after the owner closed: tokens %d, %d, want > %d, > %d", rs[0].Token, rs[1].Token, tx, ty)
			}
			if _, err := a.b.Renew(e.ctx(), driver.RenewRequest{ID: a.id}); !isEnded(err) {
				e.errorf("Renew after Close: err = %v, want ErrExpired or ErrClosed", err)
			}
			if _, err := a.b.Acquire(e.ctx(), driver.AcquireRequest{ID: a.id, Names: []string{"z"}}); !isEnded(err) {
				e.errorf("Acquire after Close: err = %v, want ErrExpired or ErrClosed", err)
			}
			if tz := b.acquire("z"); tz == 0 {
				e.errorf("the closed session acquired %q", "z")
			}
			if err := a.b.Close(e.ctx(), a.id); err != nil {
				e.errorf("second Close: %v, want nil", err)
			}
		},
	},
	{
		name:    "ContextHonoured",
		promise: "every method honours ctx: with a cancelled context it returns an error wrapping context.Canceled",
		f: func(e *env) {
			s := e.open()
			tok := s.mustAcquire("lease")
			ctx, cancel := context.WithCancel(e.t.Context())
			cancel()
			check := func(op string, err error) {
				e.t.Helper()
				if !errors.Is(err, context.Canceled) {
					e.errorf("%s with a cancelled context: err = %v, want context.Canceled", op, err)
				}
			}
			_, err := s.b.Open(ctx, driver.OpenRequest{LeaseDuration: e.cfg.Lease})
			check("Open", err)
			_, err = s.b.Renew(ctx, driver.RenewRequest{ID: s.id})
			check("Renew", err)
			_, err = s.b.Acquire(ctx, driver.AcquireRequest{ID: s.id, Names: []string{"other"}})
			check("Acquire", err)
			check("Release", s.b.Release(ctx, driver.ReleaseRequest{ID: s.id, Leases: []driver.Lease{{Name: "lease", Token: tok}}}))
			check("Close", s.b.Close(ctx, s.id))
		},
	},
}
