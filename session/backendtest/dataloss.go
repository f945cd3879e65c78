package backendtest

import (
	"context"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// dataLoss runs last and alone (see Run), only with Config.LoseData.
var dataLoss = testCase{
	name:    "TokensSurviveDataLoss",
	promise: "after the store loses its data, old sessions stay expired, no lease is granted for one maximum lease plus one maximum lock-delay (the quarantine, with Config.MaxLease and Config.MaxLockDelay), to any client, not only the one that found the loss, and every new token is higher than every earlier one for its name",
	f: func(e *env) {
		// A machine that stalls for one MaxLease at the wrong moment makes
		// the quarantine rightly end before it is observed: the scenario
		// runs again, from new sessions, a few times before that is a
		// failure.
		const attempts = 3
		for i := 1; i <= attempts; i++ {
			if dataLossOnce(e) || e.t.Failed() {
				return
			}
			e.wait(e.quarantineLen()) // the quarantine is over: a fresh start
		}
		e.errorf("%d attempts each took a quarantine (%v) or more between the loss and an Acquire: the quarantine could not be observed; raise Config.MaxLease for this machine", attempts, e.quarantineLen())
	},
}

// dataLossOnce runs the data loss scenario once; false when the machine was
// too slow for the quarantine to be observed (nothing failed, nothing was
// checked).
func dataLossOnce(e *env) bool {
	a := e.open()
	tx := a.mustAcquire("x")
	a.release(driver.Lease{Name: "x", Token: tx})
	tx = a.mustAcquire("x") // two terms, so the counter is past 1
	ty := a.mustAcquire("y")
	e.cfg.LoseData(e.t)
	lost := time.Now()
	if _, err := a.b.Renew(e.ctx(), driver.RenewRequest{ID: a.id}); !isEnded(err) {
		e.errorf("Renew of a session from before the data loss: err = %v, want ErrExpired", err)
	}
	b := e.client()
	reply, err := b.Open(e.ctx(), driver.OpenRequest{LeaseDuration: e.cfg.Lease})
	if err != nil {
		if e.cfg.MaxLease > 0 {
			e.fatalf("Open after data loss: %v; Open keeps working during the quarantine", err)
		}
		e.t.Logf("Open after data loss refused (allowed without Config.MaxLease): %v", err)
		return true
	}
	if reply.ID == a.id {
		e.errorf("Open after data loss returned the old ID %s", a.id)
	}
	s := &sess{e: e, b: b, id: reply.ID, opened: reply}
	defer func() { _ = b.Close(context.Background(), s.id) }()
	if e.cfg.MaxLease > 0 {
		q, ok := s.quarantined(lost, true, "x", "y")
		if !ok {
			return false
		}
		// Another process, which did not find the loss, is quarantined
		// too: the quarantine lives in the store, not in the finder's
		// memory.
		c := e.client()
		cr, err := c.Open(e.ctx(), driver.OpenRequest{LeaseDuration: e.cfg.Lease})
		if err != nil {
			e.fatalf("Open of another client in the quarantine: %v; Open keeps working during the quarantine", err)
		}
		cs := &sess{e: e, b: c, id: cr.ID, opened: cr}
		_, ok = cs.quarantined(lost, true, "x", "y")
		_ = c.Close(context.Background(), cs.id)
		if !ok {
			return false
		}
		s.pass(q / 2)
		q2, ok := s.quarantined(lost, false, "x", "y")
		if !ok {
			return false
		}
		if q2 > q-q/4 {
			e.errorf("Acquire %v into a quarantine of %v: Quarantine = %v: it counts down from the loss's detection, a later Acquire does not restart it", q/2, q, q2)
		}
		s.pass(q - q/2 + e.quarantineSlack())
		for i, before := range []uint64{tx, ty} {
			name := []string{"x", "y"}[i]
			if tok := s.mustAcquire(name); tok <= before {
				e.errorf("Acquire(%q) after the quarantine: token %d, want > %d: tokens never go backwards", name, tok, before)
			}
		}
		return true
	}
	acq, err := b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: []string{"x", "y"}})
	if err != nil {
		e.t.Logf("Acquire after data loss refused (allowed): %v", err)
		return true
	}
	if len(acq.Results) != 2 {
		e.fatalf("Acquire of 2 names after data loss: %d results", len(acq.Results))
	}
	if acq.Quarantine != 0 {
		e.fatalf("Acquire after data loss: Quarantine = %v but Config.MaxLease is zero: set it to the backend's maximum lease so the kit checks the quarantine", acq.Quarantine)
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
	return true
}

// namespaceCases check that a namespace's first use is quarantined exactly
// when nothing initialised it (ADR 0130).
var namespaceCases = []testCase{
	{
		name:    "InitialisedNamespaceNotQuarantined",
		promise: "a namespace created by the backend (its constructor, or Config.Init) grants at its first Acquire: no quarantine without a loss",
		f: func(e *env) {
			s := e.open()
			if tok := s.mustAcquire("x"); tok == 0 {
				return // mustAcquire failed the test
			}
		},
	},
	{
		name:    "UninitialisedNamespaceQuarantined",
		waits:   true,
		promise: "a namespace nobody initialised cannot be told from one that lost its records: its first Acquire is quarantined for one maximum lease (plus one maximum lock-delay), then grants (only with Config.Init)",
		f: func(e *env) {
			if e.cfg.Init == nil {
				e.t.Skip("Config.Init is nil: the backend creates its namespaces, which start initialised")
			}
			e.initialised = true // and Init never runs here
			start := time.Now()
			s := e.open()
			q, ok := s.quarantined(start, true, "x")
			if !ok {
				e.t.Errorf("the first Acquire came a quarantine (%v) after the namespace's first use: the quarantine could not be observed; raise Config.MaxLease for this machine", e.quarantineLen())
				return
			}
			s.pass(q + e.quarantineSlack())
			s.mustAcquire("x")
		},
	},
}
