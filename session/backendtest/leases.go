package backendtest

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// leaseCases check leases: acquisition, tokens, release, the owned set.
var leaseCases = []testCase{
	{
		name:    "TakeoverAfterExpiry",
		waits:   true,
		promise: "a name whose owner's session expired can be acquired, with a higher token, and the old owner's release is a no-op",
		f: func(e *env) {
			a := e.open()
			ta := a.mustAcquire("lease")
			e.waitExpiry()
			b := e.open()
			tb := b.acquireAfterExpiry("lease")
			if tb <= ta {
				e.fatalf("Acquire after the owner expired: token %d, want > %d", tb, ta)
			}
			// A late release from the expired owner must not free it.
			err := a.b.Release(e.ctx(), driver.ReleaseRequest{ID: a.id, Leases: []driver.Lease{{Name: "lease", Token: ta}}})
			if err != nil && !errors.Is(err, driver.ErrExpired) {
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
			s.release(driver.Lease{Name: "b", Token: want["b"]})
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
			a.release(driver.Lease{Name: "lease", Token: t1})
			a.wantOwned(map[string]uint64{})
			t2 := b.acquire("lease")
			if t2 <= t1 {
				e.fatalf("Acquire after release: token %d, want > %d", t2, t1)
			}
			b.release(driver.Lease{Name: "lease", Token: t2})
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
					s.release(driver.Lease{Name: "lease", Token: tok})
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
			b.release(driver.Lease{Name: "lease", Token: ta})     // not b's
			a.release(driver.Lease{Name: "lease", Token: ta + 1}) // wrong token
			a.release(driver.Lease{Name: "never", Token: 1})      // not held at all
			if tb := b.acquire("lease"); tb != 0 {
				e.fatalf("a mismatched release freed the lease: another session acquired it with token %d", tb)
			}
			a.wantOwned(map[string]uint64{"lease": ta})
			a.release(driver.Lease{Name: "lease", Token: ta})
			tb := b.acquire("lease")
			if tb <= ta {
				e.fatalf("Acquire after the real release: token %d, want > %d", tb, ta)
			}
			a.release(driver.Lease{Name: "lease", Token: ta}) // late repeat
			b.wantOwned(map[string]uint64{"lease": tb})
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
				reply, err := s.b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: []string{name}})
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
				err = s.b.Release(e.ctx(), driver.ReleaseRequest{ID: s.id, Leases: []driver.Lease{{Name: name, Token: 1}}})
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
			// Every client first, then their sessions, renewed before each
			// round: the sessions must be alive when they race, and a
			// client's construction (a SQL backend's schema check) or a
			// slow round must not let the first ones expire unrenewed.
			bs := make([]driver.Backend, clients)
			for i := range bs {
				bs[i] = e.client()
			}
			ss := make([]*sess, clients)
			for i, b := range bs {
				ss[i] = e.openOn(b)
			}
			var last uint64
			for round := range rounds {
				for _, s := range ss {
					s.renew(0)
				}
				name := "race"
				toks := make([]uint64, clients)
				errs := make([]error, clients)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, s := range ss {
					wg.Go(func() {
						<-start
						reply, err := s.b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: []string{name}})
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
				ss[winner].release(driver.Lease{Name: name, Token: last})
			}
		},
	},
}
