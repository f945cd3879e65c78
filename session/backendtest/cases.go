package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
)

var cases = []testCase{
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
			seen := map[session.ID]bool{}
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
				if _, err := a.b.Renew(e.ctx(), session.RenewRequest{ID: a.id}); !errors.Is(err, session.ErrExpired) {
					e.errorf("%s: Renew of a session past its lease: err = %v, want ErrExpired", when, err)
				}
				reply, err := a.b.Acquire(e.ctx(), session.AcquireRequest{ID: a.id, Names: []string{"other"}})
				if !errors.Is(err, session.ErrExpired) {
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
		name:    "TakeoverAfterExpiry",
		waits:   true,
		promise: "a name whose owner's session expired can be acquired, with a higher token, and the old owner's release is a no-op",
		f: func(e *env) {
			a := e.open()
			ta := a.mustAcquire("lease")
			e.waitExpiry()
			b := e.open()
			tb := b.acquire("lease")
			if tb <= ta {
				e.fatalf("Acquire after the owner expired: token %d, want > %d", tb, ta)
			}
			// A late release from the expired owner must not free it.
			err := a.b.Release(e.ctx(), session.ReleaseRequest{ID: a.id, Leases: []session.Lease{{Name: "lease", Token: ta}}})
			if err != nil && !errors.Is(err, session.ErrExpired) {
				e.errorf("Release from an expired session: %v, want nil or ErrExpired", err)
			}
			b.wantOwned(map[string]uint64{"lease": tb})
		},
	},
	{
		name:    "RenewReportsOwnedLeases",
		promise: "Renew reports exactly the owned leases; Version is never 0, changes on every acquisition and release, and the full list comes whenever KnownVersion differs",
		f: func(e *env) {
			s := e.open()
			r0 := s.renew(0)
			if !r0.Full || len(r0.Leases) != 0 {
				e.errorf("Renew(known 0) of a new session: Full %v, Leases %v, want the full, empty list", r0.Full, r0.Leases)
			}
			seen := map[uint64]bool{r0.Version: true}
			toks := s.acquireAll("a", "b", "c")
			want := map[string]uint64{}
			for _, r := range toks {
				if r.Err != nil || r.Token == 0 {
					e.fatalf("Acquire(%q) of a free name: token %d, err %v", r.Name, r.Token, r.Err)
				}
				want[r.Name] = r.Token
			}
			r1 := s.renew(r0.Version)
			if seen[r1.Version] {
				e.errorf("after acquiring 3 leases, Version = %d, a value already used", r1.Version)
			}
			seen[r1.Version] = true
			if !r1.Full || !mapsEqual(leaseMap(e, r1.Leases), want) {
				e.errorf("Renew after acquiring: Full %v, Leases %v, want %v", r1.Full, r1.Leases, sorted(want))
			}
			r2 := s.renew(r1.Version)
			if r2.Version != r1.Version {
				e.errorf("Renew with nothing changed: Version %d, want unchanged %d", r2.Version, r1.Version)
			}
			if r2.Full && !mapsEqual(leaseMap(e, r2.Leases), want) {
				e.errorf("Renew with nothing changed lists %v, want %v", r2.Leases, sorted(want))
			}
			s.release(session.Lease{Name: "b", Token: want["b"]})
			delete(want, "b")
			r3 := s.renew(r1.Version)
			if seen[r3.Version] {
				e.errorf("after a release, Version = %d, a value already used", r3.Version)
			}
			if !r3.Full || !mapsEqual(leaseMap(e, r3.Leases), want) {
				e.errorf("Renew after a release: Full %v, Leases %v, want %v", r3.Full, r3.Leases, sorted(want))
			}
			s.wantOwned(want)
		},
	},
	{
		name:    "RenewListsManyLeases",
		promise: "Renew is one call whatever the number of leases: one reply lists them all, and an unchanged set keeps its Version",
		f: func(e *env) {
			const n = 200
			s := e.open()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("many-%03d", i)
			}
			want := map[string]uint64{}
			for _, r := range s.acquireAll(names...) {
				if r.Err != nil || r.Token == 0 {
					e.fatalf("Acquire(%q) of a free name: token %d, err %v", r.Name, r.Token, r.Err)
				}
				want[r.Name] = r.Token
			}
			r1 := s.renew(0)
			if got := leaseMap(e, r1.Leases); !r1.Full || !mapsEqual(got, want) {
				e.errorf("Renew(known 0) with %d leases: Full %v, %d listed, want all %d", n, r1.Full, len(got), n)
			}
			if r2 := s.renew(r1.Version); r2.Version != r1.Version {
				e.errorf("Renew with nothing changed: Version %d, want unchanged %d", r2.Version, r1.Version)
			}
		},
	},
	{
		name:    "AcquireRefusedWhileOwned",
		promise: "Acquire of a name owned by a live session answers token 0 and no error, and changes nothing",
		f: func(e *env) {
			a, b := e.open(), e.open()
			ta := a.mustAcquire("lease")
			if tb := b.acquire("lease"); tb != 0 {
				e.errorf("second session acquired a held name: token %d, want 0", tb)
			}
			a.wantOwned(map[string]uint64{"lease": ta})
			b.wantOwned(map[string]uint64{})
		},
	},
	{
		name:    "AcquireAfterRelease",
		promise: "a released name is free: the next Acquire wins it with a higher token",
		f: func(e *env) {
			a, b := e.open(), e.open()
			t1 := a.mustAcquire("lease")
			a.release(session.Lease{Name: "lease", Token: t1})
			a.wantOwned(map[string]uint64{})
			t2 := b.acquire("lease")
			if t2 <= t1 {
				e.fatalf("Acquire after release: token %d, want > %d", t2, t1)
			}
			b.release(session.Lease{Name: "lease", Token: t2})
			if t3 := a.acquire("lease"); t3 <= t2 {
				e.errorf("Acquire by the first owner again: token %d, want > %d", t3, t2)
			}
		},
	},
	{
		name:    "ReacquireReturnsSameToken",
		promise: "Acquire of a name the session already owns answers the token it owns it under",
		f: func(e *env) {
			s := e.open()
			t1 := s.mustAcquire("lease")
			if t2 := s.acquire("lease"); t2 != t1 {
				e.errorf("re-Acquire of an owned name: token %d, want %d", t2, t1)
			}
			rs := s.acquireAll("other", "lease")
			if rs[1].Token != t1 {
				e.errorf("re-Acquire in a batch: token %d, want %d", rs[1].Token, t1)
			}
			s.wantOwned(map[string]uint64{"lease": t1, "other": rs[0].Token})
		},
	},
	{
		name:    "TokensStrictlyIncrease",
		promise: "every new term's token is > 0 and strictly higher than every earlier token for that name, across releases and closes",
		f: func(e *env) {
			var last uint64
			for i := range 6 {
				s := e.open()
				tok := s.acquire("lease")
				if tok == 0 || tok <= last {
					e.fatalf("term %d: token %d, want > %d", i, tok, last)
				}
				last = tok
				if i%2 == 0 {
					s.release(session.Lease{Name: "lease", Token: tok})
				} else {
					s.close()
				}
			}
		},
	},
	{
		name:    "StaleReleaseIsNoop",
		promise: "Release deletes a lease only when the session owns it under that token; any other release is a no-op without error",
		f: func(e *env) {
			a, b := e.open(), e.open()
			ta := a.mustAcquire("lease")
			b.release(session.Lease{Name: "lease", Token: ta})     // not b's
			a.release(session.Lease{Name: "lease", Token: ta + 1}) // wrong token
			a.release(session.Lease{Name: "never", Token: 1})      // not held at all
			if tb := b.acquire("lease"); tb != 0 {
				e.fatalf("a mismatched release freed the lease: another session acquired it with token %d", tb)
			}
			a.wantOwned(map[string]uint64{"lease": ta})
			a.release(session.Lease{Name: "lease", Token: ta})
			tb := b.acquire("lease")
			if tb <= ta {
				e.fatalf("Acquire after the real release: token %d, want > %d", tb, ta)
			}
			a.release(session.Lease{Name: "lease", Token: ta}) // late repeat
			b.wantOwned(map[string]uint64{"lease": tb})
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
			if _, err := a.b.Renew(e.ctx(), session.RenewRequest{ID: a.id}); !isEnded(err) {
				e.errorf("Renew after Close: err = %v, want ErrExpired or ErrClosed", err)
			}
			if _, err := a.b.Acquire(e.ctx(), session.AcquireRequest{ID: a.id, Names: []string{"z"}}); !isEnded(err) {
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
		name:    "BatchAcquire",
		promise: "one Acquire carries many names and answers each in order: free names won, held names token 0, invalid names an error, all in one call",
		f: func(e *env) {
			holder, s := e.open(), e.open()
			const n = 50
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("batch-%02d", i)
			}
			held := map[string]bool{}
			for i := 1; i < n; i += 7 {
				holder.mustAcquire(names[i])
				held[names[i]] = true
			}
			names[3] = "bad/name"
			rs := s.acquireAll(names...)
			want := map[string]uint64{}
			for _, r := range rs {
				switch {
				case r.Name == "bad/name":
					if !errors.Is(r.Err, deadline.ErrInvalidName) {
						e.errorf("Acquire(%q) in a batch: err = %v, want ErrInvalidName", r.Name, r.Err)
					}
				case r.Err != nil:
					e.errorf("Acquire(%q) in a batch: unexpected error %v", r.Name, r.Err)
				case held[r.Name] && r.Token != 0:
					e.errorf("Acquire(%q) in a batch: token %d for a name held by another session, want 0", r.Name, r.Token)
				case !held[r.Name] && r.Token == 0:
					e.errorf("Acquire(%q) in a batch: token 0 for a free name", r.Name)
				case !held[r.Name]:
					want[r.Name] = r.Token
				}
			}
			s.wantOwned(want)
		},
	},
	{
		name:    "InvalidNamesRejected",
		promise: "names are validated with deadline.ValidateName: invalid ones are rejected with an error wrapping deadline.ErrInvalidName and nothing is stored; valid edge cases work",
		f: func(e *env) {
			s := e.open()
			bad := []string{"", ".", "..", strings.Repeat("a", deadline.MaxNameLen+1), "a/b", "a b", "ä", "a\x00", "a*", "a'b", "a\nb", "{a}"}
			for _, name := range bad {
				reply, err := s.b.Acquire(e.ctx(), session.AcquireRequest{ID: s.id, Names: []string{name}})
				switch {
				case err != nil:
					if !errors.Is(err, deadline.ErrInvalidName) {
						e.errorf("Acquire(%q): err = %v, want an error wrapping ErrInvalidName", name, err)
					}
				case len(reply.Results) != 1:
					e.errorf("Acquire(%q): %d results, want 1", name, len(reply.Results))
				case !errors.Is(reply.Results[0].Err, deadline.ErrInvalidName) || reply.Results[0].Token != 0:
					e.errorf("Acquire(%q): token %d, err %v, want token 0 and an error wrapping ErrInvalidName",
						name, reply.Results[0].Token, reply.Results[0].Err)
				}
				err = s.b.Release(e.ctx(), session.ReleaseRequest{ID: s.id, Leases: []session.Lease{{Name: name, Token: 1}}})
				if err != nil && !errors.Is(err, deadline.ErrInvalidName) {
					e.errorf("Release(%q): err = %v, want nil or an error wrapping ErrInvalidName", name, err)
				}
			}
			s.wantOwned(map[string]uint64{})
			good := []string{strings.Repeat("z", deadline.MaxNameLen), "A.b_c:d-9", "...", "-", "_"}
			want := map[string]uint64{}
			for _, name := range good {
				want[name] = s.mustAcquire(name)
			}
			s.wantOwned(want)
		},
	},
	{
		name:    "NamespacesIsolated",
		promise: "clients of different namespaces never see each other's sessions or leases",
		f: func(e *env) {
			a := e.open()
			other := &env{t: e.t, cfg: e.cfg, ns: newNamespace(), promise: e.promise}
			b := other.open()
			ta, tb := a.mustAcquire("shared"), b.acquire("shared")
			if tb == 0 {
				e.fatalf("the same name in another namespace was refused")
			}
			a.wantOwned(map[string]uint64{"shared": ta})
			b.wantOwned(map[string]uint64{"shared": tb})
			a.close()
			b.wantOwned(map[string]uint64{"shared": tb})
		},
	},
	{
		name:    "RacingAcquireOneWinner",
		promise: "when sessions of several clients race for one name, exactly one wins",
		f: func(e *env) {
			const clients, rounds = 6, 4
			ss := make([]*sess, clients)
			for i := range ss {
				ss[i] = e.open()
			}
			var last uint64
			for round := range rounds {
				name := "race"
				toks := make([]uint64, clients)
				errs := make([]error, clients)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, s := range ss {
					wg.Go(func() {
						<-start
						reply, err := s.b.Acquire(e.ctx(), session.AcquireRequest{ID: s.id, Names: []string{name}})
						if err == nil && len(reply.Results) == 1 {
							toks[i], err = reply.Results[0].Token, reply.Results[0].Err
						}
						errs[i] = err
					})
				}
				close(start)
				wg.Wait()
				winner := -1
				for i, tok := range toks {
					if errs[i] != nil {
						e.fatalf("round %d: racing Acquire: %v", round, errs[i])
					}
					if tok == 0 {
						continue
					}
					if winner >= 0 {
						e.fatalf("round %d: two winners: sessions %d (token %d) and %d (token %d)", round, winner, toks[winner], i, tok)
					}
					winner = i
				}
				if winner < 0 {
					e.fatalf("round %d: nobody won a free name", round)
				}
				if toks[winner] <= last {
					e.errorf("round %d: token %d, want > %d", round, toks[winner], last)
				}
				last = toks[winner]
				ss[winner].release(session.Lease{Name: name, Token: last})
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
			_, err := s.b.Open(ctx, session.OpenRequest{LeaseDuration: e.cfg.Lease})
			check("Open", err)
			_, err = s.b.Renew(ctx, session.RenewRequest{ID: s.id})
			check("Renew", err)
			_, err = s.b.Acquire(ctx, session.AcquireRequest{ID: s.id, Names: []string{"other"}})
			check("Acquire", err)
			check("Release", s.b.Release(ctx, session.ReleaseRequest{ID: s.id, Leases: []session.Lease{{Name: "lease", Token: tok}}}))
			check("Close", s.b.Close(ctx, s.id))
		},
	},
	{
		name:    "BroadcastOnRelease",
		promise: "a Broadcaster tells a subscribed client of the same namespace, within a bounded time, about a name released or freed by Close, once that client's Acquire of it failed; stop waits until fn is no longer called",
		f:       broadcast,
	},
}

func broadcast(e *env) {
	watcher := e.client()
	bc, ok := watcher.(session.Broadcaster)
	if !ok {
		e.t.Skipf("%T does not implement session.Broadcaster; nothing to check", watcher)
	}
	notices := make(chan session.Notice, 256)
	var stopped atomic.Bool
	var late atomic.Int32
	stop, err := bc.Subscribe(func(n session.Notice) {
		if stopped.Load() {
			late.Add(1)
		}
		select {
		case notices <- n:
		default: // a full buffer loses a hint, which is allowed
		}
	})
	if err != nil {
		e.t.Fatalf("Subscribe: %v", err)
	}
	w := e.openOn(watcher)
	holder := e.open()
	expect := func(name, after string) {
		e.t.Helper()
		timer := time.NewTimer(e.cfg.NoticeTimeout)
		defer timer.Stop()
		for {
			select {
			case n := <-notices:
				if n.Name == name {
					return
				}
			case <-timer.C:
				e.errorf("no Notice{%q} within %v after %s", name, e.cfg.NoticeTimeout, after)
				return
			}
		}
	}
	tx := holder.mustAcquire("x")
	if tok := w.acquire("x"); tok != 0 {
		e.fatalf("watcher acquired a held name (token %d)", tok)
	}
	holder.release(session.Lease{Name: "x", Token: tx})
	expect("x", "the holder released it")

	holder.mustAcquire("y")
	if tok := w.acquire("y"); tok != 0 {
		e.fatalf("watcher acquired a held name (token %d)", tok)
	}
	holder.close()
	expect("y", "the holder closed its session")

	stop()
	stopped.Store(true)
	h2 := e.open()
	tz := h2.mustAcquire("z")
	h2.release(session.Lease{Name: "z", Token: tz})
	if n := late.Load(); n > 0 {
		e.errorf("fn was called %d times after stop returned", n)
	}
}

var dataLoss = testCase{
	name:    "TokensSurviveDataLoss",
	promise: "after the store loses its data, old sessions stay expired and every new token is higher than every earlier one for its name, or the backend refuses with an error",
	f: func(e *env) {
		a := e.open()
		tx := a.mustAcquire("x")
		a.release(session.Lease{Name: "x", Token: tx})
		tx = a.mustAcquire("x") // two terms, so the counter is past 1
		ty := a.mustAcquire("y")
		e.cfg.LoseData(e.t)
		if _, err := a.b.Renew(e.ctx(), session.RenewRequest{ID: a.id}); !isEnded(err) {
			e.errorf("Renew of a session from before the data loss: err = %v, want ErrExpired", err)
		}
		b := e.client()
		reply, err := b.Open(e.ctx(), session.OpenRequest{LeaseDuration: e.cfg.Lease})
		if err != nil {
			e.t.Logf("Open after data loss refused (allowed): %v", err)
			return
		}
		if reply.ID == a.id {
			e.errorf("Open after data loss returned the old ID %s", a.id)
		}
		s := &sess{e: e, b: b, id: reply.ID, opened: reply}
		defer func() { _ = b.Close(context.Background(), s.id) }()
		acq, err := b.Acquire(e.ctx(), session.AcquireRequest{ID: s.id, Names: []string{"x", "y"}})
		if err != nil {
			e.t.Logf("Acquire after data loss refused (allowed): %v", err)
			return
		}
		if len(acq.Results) != 2 {
			e.fatalf("Acquire of 2 names after data loss: %d results", len(acq.Results))
		}
		for i, before := range []uint64{tx, ty} {
			r := acq.Results[i]
			switch {
			case r.Err != nil:
				e.t.Logf("Acquire(%q) after data loss refused (allowed): %v", r.Name, r.Err)
			case r.Token <= before:
				e.errorf("Acquire(%q) after data loss: token %d, want > %d: tokens never go backwards", r.Name, r.Token, before)
			}
		}
	},
}
