package gocronsimba_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/gocronsimba"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The adapters' own logic, on the in-memory backend; the behaviour with
// real gocron schedulers on a real server is integration's gocron_test.go.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openSession(t *testing.T, b *memory.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// within runs f, failing the test if it does not return within 10s (a
// deadlock is a failure, not a hang).
func within[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() { v, err := f(); c <- result{v, err} }()
	select {
	case r := <-c:
		return r.v, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return within 10s")
		panic("unreachable")
	}
}

func TestLockerRefusesAnInvalidJobName(t *testing.T) {
	b, _ := memory.New()
	l := gocronsimba.Locker(openSession(t, b))
	defer l.Close()
	// gocron's default job name is the function's import path.
	_, err := l.Lock(context.Background(), "github.com/acme/app.report")
	if !errors.Is(err, deadline.ErrInvalidName) || !strings.Contains(err.Error(), "gocron.WithName") {
		t.Fatalf("Lock of a name with '/': %v, want deadline.ErrInvalidName naming gocron.WithName", err)
	}
}

func TestLockerNilSessionAndElectorNilElection(t *testing.T) {
	if _, err := gocronsimba.Locker(nil).Lock(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "nil *session.Session") {
		t.Fatalf("Lock on a nil session: %v", err)
	}
	if err := gocronsimba.Elector(nil).IsLeader(context.Background()); !errors.Is(err, gocronsimba.ErrNotLeader) {
		t.Fatalf("IsLeader of a nil election: %v", err)
	}
}

func TestLockerRefusesAnotherSchedulerAndAnOverlappingRun(t *testing.T) {
	b, _ := memory.New()
	l1 := gocronsimba.Locker(openSession(t, b))
	defer l1.Close()
	l2 := gocronsimba.Locker(openSession(t, b.NewClient()))
	defer l2.Close()
	ctx := context.Background()
	lk, err := l1.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := within(t, func() (gocron.Lock, error) { return l1.Lock(ctx, "report") }); !errors.Is(err, gocronsimba.ErrRunning) {
		t.Fatalf("overlapping run on the same scheduler: %v, want ErrRunning", err)
	}
	if _, err := l2.Lock(ctx, "report"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("another scheduler: %v, want lock.ErrNotAcquired", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk2, err := l2.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("after Unlock, another scheduler: %v", err)
	}
	_ = lk2.Unlock(ctx)
}

func TestHoldAtLeastKeepsTheLockAndReusesItsTerm(t *testing.T) {
	b, _ := memory.New()
	l1 := gocronsimba.Locker(openSession(t, b), gocronsimba.HoldAtLeast(time.Hour))
	l2 := gocronsimba.Locker(openSession(t, b.NewClient()))
	defer l2.Close()
	ctx := context.Background()
	var tokens []uint64
	task := l1.Task("report", func(_ context.Context, tm *term.Term) error {
		tokens = append(tokens, tm.Token())
		return nil
	})
	for range 2 {
		lk, err := l1.Lock(ctx, "report")
		if err != nil {
			t.Fatal(err)
		}
		if err := task(ctx); err != nil {
			t.Fatal(err)
		}
		_ = lk.Unlock(ctx)
		// The run is over but the hold is not: nobody else runs the tick.
		if _, err := l2.Lock(ctx, "report"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("during the hold, another scheduler: %v, want lock.ErrNotAcquired", err)
		}
	}
	if len(tokens) != 2 || tokens[0] != tokens[1] {
		t.Fatalf("tokens %v: the second run within the hold should reuse the first run's term", tokens)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	lk, err := l2.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("after Close released the hold: %v", err)
	}
	_ = lk.Unlock(ctx)
}

func TestTaskWithoutItsLockDoesNotRun(t *testing.T) {
	b, _ := memory.New()
	l := gocronsimba.Locker(openSession(t, b))
	defer l.Close()
	ran := false
	err := l.Task("report", func(context.Context, *term.Term) error { ran = true; return nil })(context.Background())
	if !errors.Is(err, gocronsimba.ErrNoLock) || ran {
		t.Fatalf("task without a lock: err %v, ran %v; want ErrNoLock and not run", err, ran)
	}
}

func TestElectorTaskContextEndsWithTheTerm(t *testing.T) {
	b, _ := memory.New()
	s := openSession(t, b)
	won := make(chan struct{})
	e, err := election.Start(s, "leader", election.OnWon(func(*term.Term) { close(won) }))
	if err != nil {
		t.Fatal(err)
	}
	<-won
	el := gocronsimba.Elector(e)
	if err := el.IsLeader(context.Background()); err != nil {
		t.Fatalf("IsLeader of the leader: %v", err)
	}
	if err := el.IsLeader(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := gocronsimba.Elector(e, gocronsimba.MinValidity(time.Hour)).IsLeader(context.Background()); !errors.Is(err, term.ErrExpired) {
		t.Fatalf("IsLeader with MinValidity above the lease: %v, want term.ErrExpired", err)
	}
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- el.Task(func(ctx context.Context, _ *term.Term) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})(context.Background())
	}()
	<-started
	if err := e.StepDown(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	var err2 error
	select {
	case err2 = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the task's context did not end within 10s of StepDown")
	}
	if err := err2; !errors.Is(err, term.SteppedDown) {
		t.Fatalf("the task's context ended with %v, want the term's reason SteppedDown", err)
	}
	if err := el.IsLeader(context.Background()); !errors.Is(err, gocronsimba.ErrNotLeader) {
		t.Fatalf("IsLeader after StepDown: %v", err)
	}
	_ = e.Close()
}

// An Elector whose election's session closed answers no at once, and a
// wrapped task does not run (review of issue 25).
func TestElectorOfAClosedSession(t *testing.T) {
	b, _ := memory.New()
	s := openSession(t, b)
	won := make(chan struct{})
	e, err := election.Start(s, "leader", election.OnWon(func(*term.Term) { close(won) }))
	if err != nil {
		t.Fatal(err)
	}
	<-won
	el := gocronsimba.Elector(e)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := within(t, func() (struct{}, error) { return struct{}{}, el.IsLeader(context.Background()) }); err == nil {
		t.Fatal("IsLeader after the session closed: nil, want an error")
	}
	ran := false
	_, err = within(t, func() (struct{}, error) {
		return struct{}{}, el.Task(func(context.Context, *term.Term) error { ran = true; return nil })(context.Background())
	})
	if err == nil || ran {
		t.Fatalf("a wrapped task after the session closed: err %v, ran %v", err, ran)
	}
	_ = e.Close()
}

// Runs racing HoldAtLeast's release timer on one Locker: never two runs
// of a job at once, every run under a valid term, nothing left held after
// Close (review of issue 25; run with -race).
func TestHoldAtLeastReleaseRacesLock(t *testing.T) {
	b, _ := memory.New()
	l := gocronsimba.Locker(openSession(t, b), gocronsimba.HoldAtLeast(time.Millisecond))
	var running, overlaps, runs atomic.Int64
	task := l.Task("report", func(_ context.Context, tm *term.Term) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		if !tm.Valid() {
			return errors.New("run under an ended term")
		}
		runs.Add(1)
		return nil
	})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				lk, err := l.Lock(context.Background(), "report")
				if err != nil {
					if !errors.Is(err, gocronsimba.ErrRunning) {
						errc <- err
						return
					}
					continue
				}
				if err := task(context.Background()); err != nil {
					errc <- err
				}
				_ = lk.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if overlaps.Load() != 0 || runs.Load() == 0 {
		t.Fatalf("%d overlapping runs of %d", overlaps.Load(), runs.Load())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := gocronsimba.Locker(openSession(t, b.NewClient()))
	defer l2.Close()
	lk, err := within(t, func() (gocron.Lock, error) { return l2.Lock(context.Background(), "report") })
	if err != nil {
		t.Fatalf("after Close, another scheduler: %v", err)
	}
	_ = lk.Unlock(context.Background())
}
