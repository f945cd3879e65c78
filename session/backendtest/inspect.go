package backendtest

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// inspectCases check [driver.Inspector], which every backend implements:
// who holds what, seen from another client, without campaigning.
var inspectCases = []testCase{
	{
		name:    "InspectListsHolders",
		promise: "Inspect lists the live holders of the given names, or of the names starting with a prefix (taken literally, never as a pattern), sorted by name, with token, session, owner and a positive Remaining",
		f: func(e *env) {
			ownerA := driver.Owner{Identity: "kit-a/1", Metadata: map[string]string{"addr": "10.0.0.1:8080"}}
			ownerB := driver.Owner{Identity: "kit-b/2"}
			// The clients first: their sessions are not renewed, and must not
			// spend their lease waiting for another client's construction
			// (a SQL backend's schema check).
			ca, cb, ci := e.client(), e.client(), e.client()
			a, b := e.openAs(ca, ownerA), e.openAs(cb, ownerB)
			hA := func(name string, tok uint64) driver.Holder {
				return driver.Holder{Name: name, Token: tok, Session: a.id, Owner: ownerA}
			}
			hB := func(name string, tok uint64) driver.Holder {
				return driver.Holder{Name: name, Token: tok, Session: b.id, Owner: ownerB}
			}
			j1, j2 := hA("jobs.1", a.mustAcquire("jobs.1")), hA("jobs.2", a.mustAcquire("jobs.2"))
			jt, other := hB("jobt", b.mustAcquire("jobt")), hB("other", b.mustAcquire("other"))
			in := e.inspector(ci) // a third process asks
			in.want(driver.InspectRequest{Prefix: "jobs."}, j1, j2)
			in.want(driver.InspectRequest{Prefix: "job"}, j1, j2, jt)
			// "_" is a LIKE wildcard and "." a regular-expression one: a
			// prefix is literal text.
			in.want(driver.InspectRequest{Prefix: "jo_s"})
			in.want(driver.InspectRequest{Prefix: "jobs.1."})
			in.want(driver.InspectRequest{Names: []string{"other", "free", "jobs.1"}}, j1, other)
			in.want(driver.InspectRequest{}, j1, j2, jt, other)
			a.release(driver.Lease{Name: j2.Name, Token: j2.Token})
			in.want(driver.InspectRequest{Prefix: "jobs."}, j1)
			b.close()
			in.want(driver.InspectRequest{}, j1)
		},
	},
	{
		name:    "InspectSkipsExpiredHolders",
		waits:   true,
		promise: "Inspect leaves out a lease whose holder's session has expired on the backend",
		f: func(e *env) {
			a := e.open()
			a.mustAcquire("x")
			in := e.inspector(e.client())
			e.waitExpiry()
			in.want(driver.InspectRequest{Names: []string{"x"}})
			in.want(driver.InspectRequest{})
		},
	},
	{
		name:    "InspectRejectsInvalidInput",
		promise: "Inspect rejects invalid names and an invalid prefix with an error wrapping deadline.ErrInvalidName; Open rejects an invalid owner with one wrapping deadline.ErrInvalidOwner",
		f: func(e *env) {
			in := e.inspector(e.client())
			for _, req := range []driver.InspectRequest{
				{Names: []string{"ok", "bad name"}},
				{Prefix: "jobs%"},
				{Prefix: "a/b"},
				{Prefix: strings.Repeat("x", deadline.MaxNameLen+1)},
			} {
				if hs, err := in.i.Inspect(e.ctx(), req); !errors.Is(err, deadline.ErrInvalidName) {
					e.errorf("Inspect(%+v) = %v, %v; want an error wrapping ErrInvalidName", req, hs, err)
				}
			}
			for _, o := range []driver.Owner{
				{Identity: "bad\x00identity"},
				{Identity: strings.Repeat("i", deadline.MaxIdentityLen+1)},
				{Metadata: map[string]string{"addr": "no identity"}},
				{Identity: "ok", Metadata: map[string]string{"bad key": "v"}},
				{Identity: "ok", Metadata: map[string]string{"big": strings.Repeat("v", deadline.MaxMetadataValueLen+1)}},
			} {
				reply, err := in.b.Open(e.ctx(), driver.OpenRequest{LeaseDuration: e.cfg.Lease, Owner: o})
				if err == nil {
					_ = in.b.Close(e.ctx(), reply.ID)
				}
				if !errors.Is(err, deadline.ErrInvalidOwner) {
					e.errorf("Open(owner %.40q) = %v; want an error wrapping ErrInvalidOwner", o.Identity, err)
				}
			}
		},
	},
}

// inspecting is a client seen as a [driver.Inspector].
type inspecting struct {
	e *env
	b driver.Backend
	i driver.Inspector
}

// inspector returns b as an Inspector, failing the subtest if it is not one.
func (e *env) inspector(b driver.Backend) inspecting {
	e.t.Helper()
	i, ok := b.(driver.Inspector)
	if !ok {
		e.fatalf("%T does not implement driver.Inspector", b)
	}
	return inspecting{e: e, b: b, i: i}
}

// want inspects req and checks that it lists exactly want, in order. The
// Remaining of each holder must be positive and at most the lease plus
// the expiry grace (it is measured on the backend's clock).
func (in inspecting) want(req driver.InspectRequest, want ...driver.Holder) {
	e := in.e
	e.t.Helper()
	got, err := in.i.Inspect(e.ctx(), req)
	if err != nil {
		e.fatalf("Inspect(%+v): %v", req, err)
	}
	names := func(hs []driver.Holder) []string {
		out := make([]string, len(hs))
		for i, h := range hs {
			out[i] = h.Name
		}
		return out
	}
	if !slices.Equal(names(got), names(want)) {
		e.errorf("Inspect(%+v) lists %q, want %q", req, names(got), names(want))
		return
	}
	for i, g := range got {
		w := want[i]
		if g.Token != w.Token || g.Session != w.Session || !sameOwner(g.Owner, w.Owner) {
			e.errorf("Inspect(%+v): holder of %q is %+v, want token %d, session %s, owner %+v", req, g.Name, g, w.Token, w.Session, w.Owner)
		}
		if g.Remaining <= 0 || g.Remaining > e.cfg.Lease+e.cfg.ExpiryGrace {
			e.errorf("Inspect(%+v): holder of %q has Remaining %v, want in (0, %v]", req, g.Name, g.Remaining, e.cfg.Lease+e.cfg.ExpiryGrace)
		}
	}
}

// sameOwner compares owners, a nil and an empty metadata map alike.
func sameOwner(a, b driver.Owner) bool {
	return a.Identity == b.Identity && maps.Equal(a.Metadata, b.Metadata)
}
