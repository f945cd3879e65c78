package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, b session.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAcquireTryAcquireClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s1, s2 := open(t, b), open(t, b.NewClient())
		ctx := context.Background()
		h1, err := lock.Acquire(ctx, s1, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if !h1.Valid() || h1.Token() == 0 || h1.Name() != "nightly" {
			t.Fatalf("held: valid %v token %d name %q", h1.Valid(), h1.Token(), h1.Name())
		}
		if _, err := lock.TryAcquire(ctx, s2, "nightly"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock = %v, want ErrNotAcquired", err)
		}
		if _, _, ok := b.Owner("nightly"); !ok {
			t.Fatal("the failed TryAcquire released the holder's lease")
		}
		got := make(chan *lock.Held, 1)
		go func() {
			h, err := lock.Acquire(ctx, s2, "nightly")
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("Acquire returned while the lock is held")
		default:
		}
		if err := h1.Close(); err != nil {
			t.Fatal(err)
		}
		h2 := <-got
		if h2.Token() <= h1.Token() || h1.Valid() || h1.Term().Reason() != term.Stopped {
			t.Fatalf("after handover: tokens %d -> %d, old valid %v reason %v", h1.Token(), h2.Token(), h1.Valid(), h1.Term().Reason())
		}
		if err := h2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := b.Owner("nightly"); ok {
			t.Fatal("lock still owned after Close")
		}
	})
}

func TestLockLostIsReleasedForGood(t *testing.T) {
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
		select {
		case <-h.Done():
		default:
			t.Fatal("Done not closed after the session expired")
		}
		if h.Valid() || !errors.Is(h.EnsureValid(0), term.ErrExpired) || !errors.Is(h.EnsureValid(0), term.SessionExpired) {
			t.Fatal("the lost lock still looks held")
		}
		if _, _, ok := b.Owner("nightly"); ok {
			t.Fatal("the lock was taken again by itself: a lock takes one term only")
		}
		if len(s.Snapshot().Entries) != 0 {
			t.Fatalf("snapshot still lists the lock: %+v", s.Snapshot().Entries)
		}
		// It can be acquired anew.
		h2, err := lock.Acquire(context.Background(), s, "nightly")
		if err != nil || h2.Token() <= h.Token() {
			t.Fatalf("re-acquire: %v, token %d after %d", err, h2.Token(), h.Token())
		}
		_ = h2.Close()
	})
}

func TestAcquireGivesUpWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s1, s2 := open(t, b), open(t, b.NewClient())
		h, err := lock.Acquire(context.Background(), s1, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := lock.Acquire(ctx, s2, "nightly"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past ctx = %v, want DeadlineExceeded", err)
		}
		if len(s2.Snapshot().Entries) != 0 {
			t.Fatal("the abandoned Acquire left its election behind")
		}
		// Locking the same name twice on one session is refused.
		if _, err := lock.Acquire(context.Background(), s1, "nightly"); !errors.Is(err, session.ErrAlreadyStarted) {
			t.Fatalf("Acquire of a name held on the same session = %v, want ErrAlreadyStarted", err)
		}
	})
}

// An Acquire waiting without a deadline must not outlive its session: when
// the session closes, nothing can ever be acquired on it.
func TestAcquireReturnsWhenTheSessionCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s1 := open(t, b)
		s2, err := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		h, err := lock.Acquire(context.Background(), s1, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		waiting := make(chan error, 1)
		go func() {
			_, err := lock.Acquire(context.Background(), s2, "nightly")
			waiting <- err
		}()
		synctest.Wait()
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-waiting:
			if !errors.Is(err, session.ErrClosed) {
				t.Fatalf("Acquire on a closed session = %v, want ErrClosed", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Acquire still waits after its session closed")
		}
	})
}

// cancelOnWin cancels a context as the backend grants a lease: the
// acquirer's ctx ends exactly as it wins.
type cancelOnWin struct {
	*memory.Backend
	cancel func()
}

func (c *cancelOnWin) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := c.Backend.Acquire(ctx, req)
	if err == nil && len(r.Results) > 0 && r.Results[0].Token != 0 && c.cancel != nil {
		c.cancel()
	}
	return r, err
}

// Acquire whose ctx ends exactly as it wins either returns the lock, held,
// or an error with the lease given back: never an error while the lease
// stays taken, never a lock that is not held.
func TestAcquireWhoseContextEndsAsItWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		w := &cancelOnWin{Backend: b}
		s := open(t, w)
		got, gaveUp := 0, 0
		for i := range 40 {
			name := fmt.Sprintf("n%d", i)
			ctx, cancel := context.WithCancel(context.Background())
			layer.MustOf(s).Do(func() { w.cancel = cancel })
			h, err := lock.Acquire(ctx, s, name)
			cancel()
			synctest.Wait()
			_, _, owned := b.Owner(name)
			switch {
			case err == nil:
				got++
				if !h.Valid() || !owned {
					t.Fatalf("%s: returned a lock that is not held (valid %v, owned %v)", name, h.Valid(), owned)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			case errors.Is(err, context.Canceled):
				gaveUp++
				if owned {
					t.Fatalf("%s: Acquire gave up (%v) but the lease stays taken", name, err)
				}
			default:
				t.Fatalf("%s: Acquire = %v", name, err)
			}
			if n := len(s.Snapshot().Entries); n != 0 {
				t.Fatalf("%s: %d entries left on the session", name, n)
			}
		}
		t.Logf("won %d, gave up %d of 40", got, gaveUp)
	})
}

// TryAcquire on a SUSPENDED session makes its attempt only once the session
// is LIVE again; ctx bounds that wait and leaves nothing behind.
func TestTryAcquireWaitsForALiveSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := open(t, b)
		b.FailCalls(errors.New("backend down"))
		<-time.After(5*time.Second + time.Millisecond) // the renewal fails
		synctest.Wait()
		if s.State() != session.Suspended {
			t.Fatalf("state %v, want SUSPENDED", s.State())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := lock.TryAcquire(ctx, s, "nightly"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryAcquire on a SUSPENDED session = %v, want DeadlineExceeded", err)
		}
		if n := len(s.Snapshot().Entries); n != 0 {
			t.Fatalf("%d entries left behind", n)
		}
		b.FailCalls(nil)
		done := make(chan error, 1)
		go func() {
			h, err := lock.TryAcquire(context.Background(), s, "nightly")
			if err == nil {
				err = h.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("TryAcquire once LIVE again = %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("TryAcquire did not attempt once the session was LIVE again")
		}
	})
}

// Defect 5 of issue 9: lock.Acquire from a Direct-executor callback waited
// until its context ended: its own win was queued on the delivery loop,
// behind the blocked callback. It returns the lock now (the win does not go
// through the loop), and closing it from there does not wait for itself.
func TestAcquireFromADirectCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		s := open(t, b)
		type result struct {
			held     *lock.Held
			err      error
			closeErr error
		}
		got := make(chan result, 1)
		_, err := election.Start(s, "leader", election.WithExecutor(election.Direct{}), election.WithListener(election.Funcs{
			Elected: func(tm *term.Term) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				h, err := lock.Acquire(ctx, s, "resource")
				r := result{held: h, err: err}
				if h != nil {
					r.closeErr = h.Close()
				}
				got <- r
			},
		}))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := <-got
		if waited := time.Since(start); waited > time.Minute {
			t.Fatalf("Acquire from a Direct callback returned after %v", waited)
		}
		if r.err != nil || r.held == nil {
			t.Fatalf("Acquire from a Direct callback = %v, %v; want the lock", r.held, r.err)
		}
		// Close from the delivery loop starts the release and does not
		// wait for it, as every blocking close there (spec, "Callbacks and
		// lifecycle").
		if !errors.Is(r.closeErr, session.ErrWouldBlockSelf) {
			t.Fatalf("Close from the callback = %v, want ErrWouldBlockSelf", r.closeErr)
		}
		synctest.Wait()
		if _, _, ok := b.Owner("resource"); ok {
			t.Fatal("the lock's lease was not released")
		}
	})
}

// A session logging at Info (the default level) writes no line per lock
// acquisition: a lock's terms are logged at Debug.
func TestLockTermsAreNotLoggedAtInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		b, _ := memory.New()
		s, err := session.Open(context.Background(), b, session.WithLogger(l))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		h, err := lock.TryAcquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the events are written by whichever goroutine runs the delivery loop
		if strings.Contains(buf.String(), "Term") {
			t.Fatalf("a lock's terms were logged at Info:\n%s", buf.String())
		}
		if !strings.Contains(buf.String(), "SessionOpened") {
			t.Fatalf("the session's life is not logged at Info:\n%s", buf.String())
		}
	})
}

// TryAcquire during a data-loss quarantine (here: a namespace nobody
// initialised, which cannot be told from a lost one) says why it failed:
// an error wrapping session.ErrQuarantined, not ErrNotAcquired, since no
// other session holds the lock. Once the quarantine is over it succeeds.
func TestTryAcquireDuringAQuarantineSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New(memory.WithUninitialisedNamespace(), memory.WithMaxLease(15*time.Second))
		s := open(t, b)
		_, err := lock.TryAcquire(context.Background(), s, "nightly")
		if !errors.Is(err, session.ErrQuarantined) || errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire during a quarantine = %v, want an error wrapping session.ErrQuarantined (and not ErrNotAcquired)", err)
		}
		if !strings.Contains(err.Error(), `"nightly"`) {
			t.Errorf("TryAcquire error %q does not name the lock", err)
		}
		time.Sleep(15 * time.Second) // virtual time: the quarantine passes
		h, err := lock.TryAcquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatalf("TryAcquire after the quarantine: %v", err)
		}
		_ = h.Close()
	})
}

// goroutineID reads the calling goroutine's id from its stack header.
func goroutineID() string {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	return f[1]
}

// callerBackend records on which goroutine each Acquire and Release runs,
// and can make an Acquire last until its context ends, then grant it all
// the same (the server's grant raced the cancellation).
type callerBackend struct {
	*memory.Backend
	mu       sync.Mutex
	acquires []string
	releases []string
	slow     bool
}

func (c *callerBackend) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.AcquireReply, error) {
	c.mu.Lock()
	c.acquires = append(c.acquires, goroutineID())
	slow := c.slow
	c.mu.Unlock()
	if slow {
		<-ctx.Done()
		ctx = context.WithoutCancel(ctx)
	}
	return c.Backend.Acquire(ctx, r)
}

func (c *callerBackend) Release(ctx context.Context, r driver.ReleaseRequest) error {
	c.mu.Lock()
	c.releases = append(c.releases, goroutineID())
	c.mu.Unlock()
	return c.Backend.Release(ctx, r)
}

// An uncontended lock's backend calls run on the caller's goroutine: it
// waits for them anyway, and handing each to a goroutine of its own and
// its reply back was most of the engine's cost per lock (issue 11).
func TestUncontendedLockCallsRunOnTheCallersGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &callerBackend{Backend: mb}
		s := open(t, b)
		me := goroutineID()
		h, err := lock.TryAcquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.acquires) != 1 || b.acquires[0] != me || len(b.releases) != 1 || b.releases[0] != me {
			t.Fatalf("caller goroutine %s; Acquire ran on %v, Release on %v: want one each, on the caller's", me, b.acquires, b.releases)
		}
	})
}

// The first attempt runs on the caller's goroutine, yet the caller's ctx
// still bounds TryAcquire: when it ends first the attempt is given up as if
// it had timed out (its context is cancelled), and a lease the backend
// grants all the same is given back at once rather than kept until a
// renewal notices it.
func TestTryAcquireGivesUpItsFirstAttemptWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &callerBackend{Backend: mb}
		s := open(t, b)
		b.mu.Lock()
		b.slow = true
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := lock.TryAcquire(ctx, s, "nightly")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryAcquire = %v, want the context's DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("TryAcquire returned after %v, want the context's 1s (not the call timeout)", d)
		}
		b.mu.Lock()
		b.slow = false
		b.mu.Unlock()
		synctest.Wait()
		if _, _, ok := mb.Owner("nightly"); ok {
			t.Fatal("the lease granted after the attempt was given up is still held")
		}
		h, err := lock.TryAcquire(context.Background(), s, "nightly")
		if err != nil {
			t.Fatalf("TryAcquire after the given-up attempt: %v", err)
		}
		_ = h.Close()
	})
}

// A blocked Acquire makes its later attempts itself: the one answering the
// holder's release notice runs on the waiting caller's goroutine, which
// then holds the lock without being woken by another goroutine.
func TestBlockedAcquireMakesItsAttemptsOnItsOwnGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		s1 := open(t, mb)
		b2 := &callerBackend{Backend: mb.NewClient()}
		s2 := open(t, b2)
		ctx := context.Background()
		h1, err := lock.Acquire(ctx, s1, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		waiter := make(chan string, 1)
		got := make(chan *lock.Held, 1)
		go func() {
			waiter <- goroutineID()
			h, err := lock.Acquire(ctx, s2, "nightly")
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
		me := <-waiter
		synctest.Wait() // B's first attempt failed; B waits
		if err := h1.Close(); err != nil {
			t.Fatal(err)
		}
		h2 := <-got
		b2.mu.Lock()
		acquires := append([]string(nil), b2.acquires...)
		b2.mu.Unlock()
		if len(acquires) != 2 || acquires[0] != me || acquires[1] != me {
			t.Fatalf("B's goroutine %s; its Acquire calls ran on %v: want the failed first attempt and the notice's, both on B's", me, acquires)
		}
		_ = h2.Close()
	})
}

// A blocked Acquire whose context ends just as a release notice hands it
// an attempt leaves nothing behind: the attempt is made (here or on a
// goroutine), the session goes on attempting, and Close returns.
func TestBlockedAcquireGivenUpAsItsAttemptArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		s1 := open(t, mb)
		s2, err := session.Open(context.Background(), mb.NewClient(), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			h1, err := lock.Acquire(context.Background(), s1, "nightly")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan *lock.Held, 1)
			go func() {
				h, _ := lock.Acquire(ctx, s2, "nightly")
				res <- h
			}()
			synctest.Wait()
			cancel()
			_ = h1.Close() // its notice reaches B's session as B gives up
			if h := <-res; h != nil {
				_ = h.Close()
			}
			synctest.Wait()
		}
		h, err := lock.TryAcquire(context.Background(), s2, "nightly")
		if err != nil {
			t.Fatalf("B's session after the given-up waits: %v", err)
		}
		_ = h.Close()
		closed := make(chan error, 1)
		go func() { closed <- s2.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("B's session did not close: a call handed to a caller that gave up was never run")
		}
	})
}

// heldRelease is a backend whose Release waits until it is let go, and
// records what each Release carried and whether the term it releases was
// still valid when the release reached the backend.
type heldRelease struct {
	*memory.Backend
	mu      sync.Mutex
	term    *term.Term
	tokens  []uint64
	revoked []bool
	letGo   chan struct{}
}

func (b *heldRelease) Release(ctx context.Context, r driver.ReleaseRequest) error {
	b.mu.Lock()
	for _, l := range r.Leases {
		b.tokens = append(b.tokens, l.Token)
	}
	b.revoked = append(b.revoked, b.term != nil && !b.term.Valid() && b.term.Reason() == term.Stopped)
	letGo := b.letGo
	b.mu.Unlock()
	if letGo != nil {
		<-letGo
	}
	return b.Backend.Release(ctx, r)
}

// Close hands over in order: the term is revoked (STOPPED) before the
// release reaches the backend, the release carries the term's token, and
// Close returns only once the backend has answered it, also when the
// release does not run on Close's goroutine (here: it waits for another
// lock's release, in flight). Until then the name stays taken on the
// session: a new lock of it fails with ErrAlreadyStarted, so no acquire of
// the name can overtake the release of the older token (ADR 0161).
func TestCloseRevokesReleasesWithTheTokenAndWaitsForTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, _ := memory.New()
		b := &heldRelease{Backend: mb}
		s := open(t, b)
		ctx := context.Background()
		first, err := lock.TryAcquire(ctx, s, "first")
		if err != nil {
			t.Fatal(err)
		}
		h, err := lock.TryAcquire(ctx, s, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		b.term, b.letGo = h.Term(), make(chan struct{})
		b.mu.Unlock()
		firstClosed := make(chan error, 1)
		go func() { firstClosed <- first.Close() }()
		synctest.Wait() // first's release waits in the backend
		closed := make(chan error, 1)
		go func() { closed <- h.Close() }()
		synctest.Wait() // h's release waits for first's
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) before the backend answered the release", err)
		default:
		}
		if !errors.Is(h.EnsureValid(0), term.ErrExpired) || h.Term().Reason() != term.Stopped {
			t.Fatalf("term while its release waits: valid %v, reason %v; want revoked STOPPED", h.Valid(), h.Term().Reason())
		}
		if _, err := lock.TryAcquire(ctx, s, "nightly"); !errors.Is(err, session.ErrAlreadyStarted) {
			t.Fatalf("TryAcquire of a name whose release is unanswered = %v, want ErrAlreadyStarted", err)
		}
		close(b.letGo)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := <-firstClosed; err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		tokens, revoked := b.tokens, b.revoked
		b.mu.Unlock()
		if len(tokens) != 2 || tokens[1] != h.Token() || len(revoked) != 2 || !revoked[1] {
			t.Fatalf("releases carried tokens %v (want [%d %d]), nightly's term revoked (STOPPED) when its release reached the backend: %v", tokens, first.Token(), h.Token(), revoked)
		}
		if _, _, ok := mb.Owner("nightly"); ok {
			t.Fatal("lock still owned after Close")
		}
		if err := h.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		h2, err := lock.TryAcquire(ctx, s, "nightly")
		if err != nil || h2.Token() <= h.Token() {
			t.Fatalf("TryAcquire after Close = %v (token %d after %d)", err, h2.Token(), h.Token())
		}
		_ = h2.Close()
	})
}
