package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// lostRelease loses every Release while lose is set: the call fails
// without reaching the backend, which keeps the lease.
type lostRelease struct {
	*memory.Backend
	lose *atomic.Bool
}

func (l lostRelease) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if l.lose.Load() {
		return errors.New("connection reset")
	}
	return l.Backend.Release(ctx, req)
}

// Issue 20, item 3: when the backend answers "already yours, token 1" for
// a name whose earlier release failed, the attempt made neither a term
// (the token is not above the released one) nor a refusal: TryAcquire
// waited 5 s for candidate ticks and made 3 Acquire calls. It is one
// attempt now, answered at once: not acquired (the lease is held, by this
// session's earlier term), and the stale lease is released again.
func TestTryAcquireOnAStaleAlreadyYoursGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		lose := &atomic.Bool{}
		s := open(t, lostRelease{b, lose})
		ctx := context.Background()
		h, err := lock.TryAcquire(ctx, s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		lose.Store(true)
		_ = h.Close() // the release is lost: the backend still lists token 1 as this session's
		lose.Store(false)
		if _, tok, ok := b.Owner("nightly"); !ok || tok != h.Token() {
			t.Fatalf("owner after the lost release: token %d, held %v; want the old token still held", tok, ok)
		}
		acquires := b.Stats().Acquire
		start := time.Now()
		_, err = lock.TryAcquire(ctx, s, "nightly")
		took := time.Since(start)
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire on a stale grant = %v, want ErrNotAcquired", err)
		}
		if n := b.Stats().Acquire - acquires; n != 1 || took > 0 {
			t.Fatalf("TryAcquire on a stale grant made %d Acquire calls in %v, want 1 answered at once", n, took)
		}
		synctest.Wait()
		if _, _, ok := b.Owner("nightly"); ok {
			t.Fatal("the stale lease was not released again")
		}
		h2, err := lock.TryAcquire(ctx, s, "nightly")
		if err != nil || h2.Token() <= h.Token() {
			t.Fatalf("TryAcquire after the stale lease's release = %v (token above %d wanted)", err, h.Token())
		}
		_ = h2.Close()
	})
}

// movedSet answers renewals, while moved is set, with an owned-set version
// the session has not seen and no list: the backend's set moved on.
type movedSet struct {
	*memory.Backend
	moved *atomic.Bool
}

func (m movedSet) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := m.Backend.Renew(ctx, req)
	if err == nil && m.moved.Load() {
		r.Full, r.Leases, r.Version = false, nil, r.Version+1<<40
	}
	return r, err
}

// A TryAcquire queued while the session is SUSPENDED attempts as soon as
// it is LIVE again: also when the renewal that makes it LIVE reports an
// owned set that moved on (that path returned without sending the queued
// attempts, which then waited for the candidate tick, seconds later).
func TestTryAcquireAttemptsOnceLiveAgainWhateverTheRenewalSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		moved := &atomic.Bool{}
		s := open(t, movedSet{b, moved})
		b.FailCalls(errors.New("backend down"))
		<-time.After(5*time.Second + time.Millisecond) // the renewal fails: SUSPENDED
		synctest.Wait()
		done := make(chan time.Time, 1)
		go func() {
			h, err := lock.TryAcquire(context.Background(), s, "nightly")
			if err != nil {
				t.Error(err)
			} else {
				_ = h.Close()
			}
			done <- time.Now()
		}()
		synctest.Wait() // queued, waiting for LIVE
		b.FailCalls(nil)
		moved.Store(true)
		var liveAt time.Time
		for s.State() != session.Live {
			<-time.After(time.Millisecond)
			liveAt = time.Now()
		}
		select {
		case at := <-done:
			if d := at.Sub(liveAt); d > 10*time.Millisecond {
				t.Fatalf("TryAcquire attempted %v after the session was LIVE again, want at once", d)
			}
		case <-time.After(time.Minute):
			t.Fatal("TryAcquire did not return")
		}
	})
}
