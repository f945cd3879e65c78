package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// Closing a lock that was lost (its claim dropped, the name free) after a
// new lock of the name was taken on the same session leaves the new one
// alone: the old Close releases nothing.
func TestCloseOfALostLockLeavesTheNextLockOfItsName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := open(t, b)
		h, err := lock.Acquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		b.Expire(s.ID())
		<-time.After(time.Minute)
		synctest.Wait()
		if h.Valid() || h.Remaining() != 0 || h.Term().Reason() != term.SessionExpired {
			t.Fatalf("lost lock: valid %v remaining %v reason %v", h.Valid(), h.Remaining(), h.Term().Reason())
		}
		h2, err := lock.Acquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, tok, ok := b.Owner("nightly"); !ok || tok != h2.Token() || !h2.Valid() {
			t.Fatalf("after the lost lock's Close: owned %v token %d (want %d), new lock valid %v", ok, tok, h2.Token(), h2.Valid())
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := h2.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Close called concurrently from many goroutines: every call returns nil
// once the release is answered, and the name is free when each returns.
func TestConcurrentClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := open(t, b)
		for i := range 20 {
			name := fmt.Sprintf("n%d", i)
			h, err := lock.TryAcquire(context.Background(), s, name)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := h.Close(); err != nil {
						t.Error(err)
					}
					if _, _, ok := b.Owner(name); ok {
						t.Errorf("%s: Close returned with the lease still owned", name)
					}
				}()
			}
			wg.Wait()
			h2, err := lock.TryAcquire(context.Background(), s, name)
			if err != nil {
				t.Fatalf("%s: TryAcquire right after Close = %v", name, err)
			}
			_ = h2.Close()
		}
	})
}

// Close after the session closed returns at once, nil; Done is closed,
// STOPPED.
func TestCloseAfterTheSessionClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := open(t, b)
		h, err := lock.TryAcquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		if h.Valid() || h.Term().Reason() != term.Stopped {
			t.Fatalf("after session Close: valid %v reason %v", h.Valid(), h.Term().Reason())
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := lock.TryAcquire(context.Background(), s, "other"); !errors.Is(err, session.ErrClosed) {
			t.Fatalf("TryAcquire on a closed session = %v", err)
		}
	})
}

// TryAcquire whose ctx ends exactly as it wins: the lock held, or an error
// with the lease given back, never a lease nobody can close.
func TestTryAcquireWhoseContextEndsAsItWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		w := &cancelOnWin{Backend: b}
		s := open(t, w)
		for i := range 40 {
			name := fmt.Sprintf("n%d", i)
			ctx, cancel := context.WithCancel(context.Background())
			layer.MustOf(s).Do(func() { w.cancel = cancel })
			h, err := lock.TryAcquire(ctx, s, name)
			cancel()
			synctest.Wait()
			_, _, owned := b.Owner(name)
			switch {
			case err == nil:
				if !h.Valid() || !owned {
					t.Fatalf("%s: returned a lock that is not held (valid %v, owned %v)", name, h.Valid(), owned)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			case errors.Is(err, context.Canceled):
				if owned {
					t.Fatalf("%s: TryAcquire gave up (%v) but the lease stays taken", name, err)
				}
			default:
				t.Fatalf("%s: TryAcquire = %v", name, err)
			}
			if n := len(s.Snapshot().Entries); n != 0 {
				t.Fatalf("%s: %d entries left on the session", name, n)
			}
		}
	})
}

// Many goroutines on three sessions lock and unlock a few names, with
// contexts that end at random (as an attempt is sent, while it waits, as it
// wins): a lock returned is held and valid, no two valid locks of a name
// at once, every Close returns, and nothing is left owned or registered.
func TestLocksUnderRandomCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		ss := []*session.Session{open(t, b), open(t, b.NewClient()), open(t, b.NewClient())}
		var mu sync.Mutex
		holder := map[string]*lock.Held{}
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 30 {
					s := ss[(g+i)%len(ss)]
					name := fmt.Sprintf("n%d", (g*7+i)%3)
					ctx, cancel := context.WithCancel(context.Background())
					switch (g + i) % 4 {
					case 0:
						cancel()
					case 1:
						stop := time.AfterFunc(time.Duration((g*i)%7)*time.Millisecond, cancel)
						defer stop.Stop()
					}
					var h *lock.Held
					var err error
					if i%2 == 0 {
						h, err = lock.TryAcquire(ctx, s, name)
					} else {
						h, err = lock.Acquire(ctx, s, name)
					}
					cancel()
					if err != nil {
						if !errors.Is(err, lock.ErrNotAcquired) && !errors.Is(err, context.Canceled) && !errors.Is(err, session.ErrAlreadyStarted) {
							t.Errorf("%s: %v", name, err)
						}
						continue
					}
					mu.Lock()
					if p := holder[name]; p != nil && p.Valid() {
						t.Errorf("%s: two valid locks, tokens %d and %d", name, p.Token(), h.Token())
					}
					if !h.Valid() {
						t.Errorf("%s: returned a lock that is not valid", name)
					}
					holder[name] = h
					mu.Unlock()
					<-time.After(time.Millisecond) // hold the lock a while (virtual time): others contend
					if err := h.Close(); err != nil {
						t.Errorf("%s: Close = %v", name, err)
					}
				}
			}()
		}
		wg.Wait()
		synctest.Wait()
		for _, name := range []string{"n0", "n1", "n2"} {
			if _, _, ok := b.Owner(name); ok {
				t.Errorf("%s still owned after every lock was closed", name)
			}
		}
		for i, s := range ss {
			if n := len(s.Snapshot().Entries); n != 0 {
				t.Errorf("session %d: %d entries left: %+v", i, n, s.Snapshot().Entries)
			}
		}
	})
}
