package backendtest

import (
	"context"

	"github.com/simba-go/simba/session/driver"
)

// dataLoss runs last and alone (see Run), only with Config.LoseData.
var dataLoss = testCase{
	name:    "TokensSurviveDataLoss",
	promise: "after the store loses its data, old sessions stay expired and every new token is higher than every earlier one for its name, or the backend refuses with an error",
	f: func(e *env) {
		a := e.open()
		tx := a.mustAcquire("x")
		a.release(driver.Lease{Name: "x", Token: tx})
		tx = a.mustAcquire("x") // two terms, so the counter is past 1
		ty := a.mustAcquire("y")
		e.cfg.LoseData(e.t)
		if _, err := a.b.Renew(e.ctx(), driver.RenewRequest{ID: a.id}); !isEnded(err) {
			e.errorf("Renew of a session from before the data loss: err = %v, want ErrExpired", err)
		}
		b := e.client()
		reply, err := b.Open(e.ctx(), driver.OpenRequest{LeaseDuration: e.cfg.Lease})
		if err != nil {
			e.t.Logf("Open after data loss refused (allowed): %v", err)
			return
		}
		if reply.ID == a.id {
			e.errorf("Open after data loss returned the old ID %s", a.id)
		}
		s := &sess{e: e, b: b, id: reply.ID, opened: reply}
		defer func() { _ = b.Close(context.Background(), s.id) }()
		acq, err := b.Acquire(e.ctx(), driver.AcquireRequest{ID: s.id, Names: []string{"x", "y"}})
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
