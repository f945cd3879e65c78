package session_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// deadlines is a Backend decorator that records, for each call, the time
// its context's Deadline leaves (or -1 without one).
type deadlines struct {
	session.Backend
	mu   sync.Mutex
	left map[string][]time.Duration
}

func (d *deadlines) note(ctx context.Context, op string) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.left[op] = append(d.left[op], left)
}

func (d *deadlines) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	d.note(ctx, "Open")
	return d.Backend.Open(ctx, req)
}

func (d *deadlines) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	d.note(ctx, "Renew")
	return d.Backend.Renew(ctx, req)
}

func (d *deadlines) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	d.note(ctx, "Acquire")
	return d.Backend.Acquire(ctx, req)
}

func (d *deadlines) Release(ctx context.Context, req driver.ReleaseRequest) error {
	d.note(ctx, "Release")
	return d.Backend.Release(ctx, req)
}

// Every backend call the engine makes carries, as its context's Deadline,
// the end of the one renewal period the engine gives it: a backend that
// cannot be interrupted while it waits in the server bounds those waits by
// it (the SQL backends' lock waits, ADR 0135). The engine's calls used to
// carry no deadline at all, so the SQL backends bounded each lock wait by
// MaxLease (30 s by default) instead of the renewal period, and a call the
// engine gave up on after 5 s could wait on and commit 30 s later.
func TestEveryBackendCallHasTheRenewalPeriodAsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &deadlines{Backend: b, left: map[string][]time.Duration{}}
		s := openDecorated(t, d)
		every := s.Config().RenewInterval
		r := &recorder{}
		c, err := layer.MustOf(s).Claim("a", r)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		advance(every + time.Millisecond)
		layer.MustOf(s).Do(func() { c.Want(false); c.Release(term.Stopped, nil) })
		synctest.Wait()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, op := range []string{"Open", "Acquire", "Renew", "Release"} {
			if len(d.left[op]) == 0 {
				t.Errorf("no %s call seen", op)
			}
			for _, left := range d.left[op] {
				if left != every {
					t.Errorf("%s's context: deadline %v ahead, want the renewal period %v (-1: none)", op, left, every)
				}
			}
		}
	})
}
