package session_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// failRelease is a Backend decorator whose next Release fails without
// releasing anything.
type failRelease struct {
	session.Backend
	fail atomic.Bool
}

func (f *failRelease) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if f.fail.CompareAndSwap(true, false) {
		return errors.New("release lost")
	}
	return f.Backend.Release(ctx, req)
}

// A renewal skips the owned-set check while the set and the terms are
// unchanged (a renewal's cost stays flat with the number of leases), yet
// a release that failed after such a renewal still leaves a lease without
// a term, which the next renewals must give back.
func TestFailedReleaseIsHealedByARenewalAfterAQuietOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &failRelease{Backend: b}
		s := openDecorated(t, d)
		r := &recorder{}
		c, err := layer.MustOf(s).Claim("a", r)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		every := s.Config().RenewInterval
		advance(3*every + time.Millisecond) // quiet renewals: the set is checked, then skipped
		if _, _, ok := b.Owner("a"); !ok || len(r.terms()) != 1 {
			t.Fatal("the lease was not won")
		}
		d.fail.Store(true)
		layer.MustOf(s).Do(func() { c.Want(false); c.Release(term.Stopped, nil) })
		synctest.Wait()
		if _, _, ok := b.Owner("a"); !ok {
			t.Fatal("the failing release released the lease")
		}
		advance(2*every + time.Millisecond)
		if id, _, ok := b.Owner("a"); ok {
			t.Fatalf("the lease is still owned by %s after two renewals: a failed release was not healed", id)
		}
	})
}
