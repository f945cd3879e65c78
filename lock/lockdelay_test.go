package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// A lock won with a lock-delay whose session expires keeps its name from
// every other session for the delay, on the backend's clock; then a
// blocked Acquire wins it with a higher token (ADR 0240).
func TestLockDelayKeepsTheNameAfterExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 10 * time.Second
		b, _ := memory.New(memory.WithMaxLockDelay(delay))
		s1, s2 := open(t, b), open(t, b.NewClient())
		h1, err := lock.Acquire(context.Background(), s1, "nightly", lock.WithLockDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		expired := time.Now()
		b.Expire(s1.ID())
		type result struct {
			h  *lock.Held
			at time.Time
		}
		got := make(chan result, 1)
		go func() {
			h, err := lock.Acquire(context.Background(), s2, "nightly")
			if err != nil {
				t.Error(err)
			}
			got <- result{h, time.Now()}
		}()
		time.Sleep(delay - time.Millisecond) // virtual time
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("Acquire won the name %v after the holder's session expired, within its lock-delay of %v", r.at.Sub(expired), delay)
		default:
		}
		r := <-got
		if r.h == nil {
			return
		}
		if r.at.Sub(expired) < delay || r.h.Token() <= h1.Token() {
			t.Fatalf("won %v after the expiry with token %d (previous %d), want ≥ %v and a higher token", r.at.Sub(expired), r.h.Token(), h1.Token(), delay)
		}
		_ = r.h.Close()
	})
}

// Close (a release) and the session's Close skip the delay: the next
// TryAcquire wins at once.
func TestLockDelaySkippedByCloseAndSessionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 10 * time.Second
		b, _ := memory.New(memory.WithMaxLockDelay(delay))
		s1, s2 := open(t, b), open(t, b.NewClient())
		ctx := context.Background()
		h1, err := lock.Acquire(ctx, s1, "a", lock.WithLockDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		if err := h1.Close(); err != nil {
			t.Fatal(err)
		}
		h2, err := lock.TryAcquire(ctx, s2, "a")
		if err != nil {
			t.Fatalf("TryAcquire right after a lock with a lock-delay was closed: %v, want the lock: a release skips the delay", err)
		}
		_ = h2.Close()
		if _, err := lock.Acquire(ctx, s1, "b", lock.WithLockDelay(delay)); err != nil {
			t.Fatal(err)
		}
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		h3, err := lock.TryAcquire(ctx, s2, "b")
		if err != nil {
			t.Fatalf("TryAcquire right after the holder's session closed: %v, want the lock: a Close skips the delay", err)
		}
		_ = h3.Close()
	})
}

// A lock-delay above the backend's maximum is a configuration error:
// TryAcquire and a blocking Acquire return it at once (no retry at every
// tick), the session publishes LockDelayRefused, nothing is left claimed;
// a negative delay is refused before anything is sent.
func TestLockDelayRefusedByTheBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New(memory.WithMaxLockDelay(time.Second))
		var mu sync.Mutex
		var events []session.Event
		s, err := session.Open(context.Background(), b, session.WithLogger(nil), session.WithListener(func(e session.Event) {
			if e.Kind == session.LockDelayRefused {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		ctx := context.Background()
		for _, acquire := range []func(context.Context, *session.Session, string, ...lock.Option) (*lock.Held, error){lock.TryAcquire, lock.Acquire} {
			before := b.Stats().Acquire
			// Bounded, so that an Acquire that waits through the refusal
			// fails the test instead of blocking it.
			bounded, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := acquire(bounded, s, "nightly", lock.WithLockDelay(2*time.Second))
			cancel()
			if !errors.Is(err, session.ErrLockDelay) || errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("a lock-delay above the backend's maximum: err = %v, want one wrapping session.ErrLockDelay", err)
			}
			if !strings.Contains(err.Error(), "WithMaxLockDelay") || !strings.Contains(err.Error(), `"nightly"`) {
				t.Errorf("error %q does not name the lock and the backend's option", err)
			}
			time.Sleep(time.Minute) // virtual time: no retries follow
			synctest.Wait()
			if n := b.Stats().Acquire - before; n != 1 {
				t.Errorf("%d Acquire calls for a refused lock-delay, want 1: a refusal the backend repeats forever is not retried", n)
			}
			if es := s.Snapshot().Entries; len(es) != 0 {
				t.Errorf("snapshot after the refusal lists %+v, want nothing", es)
			}
		}
		mu.Lock()
		if len(events) != 2 || events[0].Name != "nightly" || events[0].Remaining != 2*time.Second || !errors.Is(events[0].Err, session.ErrLockDelay) {
			t.Errorf("LockDelayRefused events %+v, want two naming the lock, its delay and the error", events)
		}
		mu.Unlock()
		if _, err := lock.TryAcquire(ctx, s, "nightly", lock.WithLockDelay(-time.Second)); !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("WithLockDelay(-1s): err = %v, want ErrInvalidOption", err)
		}
		h, err := lock.TryAcquire(ctx, s, "nightly", lock.WithLockDelay(time.Second))
		if err != nil {
			t.Fatalf("TryAcquire with the maximum lock-delay: %v", err)
		}
		_ = h.Close()
	})
}

// recorder records the Acquire requests a session sends, and holds the
// first one until gate is closed.
type recorder struct {
	*memory.Backend
	gate chan struct{}
	mu   sync.Mutex
	reqs []driver.AcquireRequest
}

func (r *recorder) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, driver.AcquireRequest{Names: append([]string(nil), req.Names...), LockDelay: req.LockDelay})
	first := len(r.reqs) == 1
	r.mu.Unlock()
	if first {
		<-r.gate
	}
	return r.Backend.Acquire(ctx, req)
}

// One Acquire carries one lock-delay: claims queued together with
// different delays go in separate calls, those with the same delay in one,
// each call carrying its claims' delay.
func TestOneAcquireCarriesOneLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New(memory.WithMaxLockDelay(time.Minute))
		b := &recorder{Backend: mb, gate: make(chan struct{})}
		s := open(t, b)
		start := func(name string, d time.Duration) {
			if _, err := election.Start(s, name, election.WithLockDelay(d)); err != nil {
				t.Fatal(err)
			}
		}
		start("gate", 0) // its Acquire is held: the next claims queue behind it
		synctest.Wait()
		start("x", time.Second)
		start("y", 2*time.Second)
		start("z", time.Second)
		start("w", 0)
		close(b.gate)
		synctest.Wait()
		b.mu.Lock()
		got := b.reqs
		b.mu.Unlock()
		want := []driver.AcquireRequest{
			{Names: []string{"gate"}},
			{Names: []string{"x", "z"}, LockDelay: time.Second},
			{Names: []string{"y"}, LockDelay: 2 * time.Second},
			{Names: []string{"w"}},
		}
		if len(got) < len(want) {
			t.Fatalf("Acquire requests %+v, want %+v", got, want)
		}
		for i, w := range want {
			g := got[i]
			if strings.Join(g.Names, ",") != strings.Join(w.Names, ",") || g.LockDelay != w.LockDelay {
				t.Errorf("Acquire %d: names %q lock-delay %v, want %q %v (all: %+v)", i, g.Names, g.LockDelay, w.Names, w.LockDelay, got)
			}
		}
		for _, n := range []string{"gate", "x", "y", "z", "w"} {
			if _, _, ok := mb.Owner(n); !ok {
				t.Errorf("%q not won", n)
			}
		}
	})
}
