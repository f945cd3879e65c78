package term

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// fakeLife is a Lifeline with a settable deadline on a settable clock,
// keeping the never-again rule.
type fakeLife struct {
	mu       sync.Mutex
	now, end time.Duration
	over     bool
}

func (f *fakeLife) Remaining() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.over || f.now >= f.end {
		f.over = true
		return 0
	}
	return f.end - f.now
}

func (f *fakeLife) set(now, end time.Duration) {
	f.mu.Lock()
	f.now, f.end = now, end
	f.mu.Unlock()
}

func TestValidIsAFunctionOfClockAndDeadline(t *testing.T) {
	life := &fakeLife{end: 10 * time.Second}
	tm, _ := New(context.Background(), "jobs", 7, life)
	if !tm.Valid() || tm.Remaining() != 10*time.Second {
		t.Fatalf("fresh term: Valid %v Remaining %v, want true 10s", tm.Valid(), tm.Remaining())
	}
	life.set(9*time.Second, 10*time.Second)
	if got := tm.Remaining(); got != time.Second {
		t.Fatalf("Remaining() = %v, want 1s", got)
	}
	// A long pause: the first read after it is false, with no watchdog.
	life.set(30*time.Second, 10*time.Second)
	if tm.Valid() {
		t.Fatal("Valid() = true after the deadline passed")
	}
	// Even if the deadline moved later afterwards, the term stays ended.
	life.set(30*time.Second, 60*time.Second)
	if tm.Valid() || tm.Remaining() != 0 {
		t.Fatalf("after the deadline passed and moved: Valid %v Remaining %v, want false 0", tm.Valid(), tm.Remaining())
	}
}

func TestRevokeExactlyOnce(t *testing.T) {
	tm, revoke := New(context.Background(), "jobs", 1, &fakeLife{end: time.Hour})
	select {
	case <-tm.Done():
		t.Fatal("Done closed before revocation")
	default:
	}
	if tm.Reason() != 0 {
		t.Fatalf("Reason() = %v before revocation, want 0", tm.Reason())
	}
	var wg sync.WaitGroup
	wins := make(chan RevokeReason, 8)
	for _, r := range []RevokeReason{Stopped, SteppedDown, DeadlinePassed, SessionExpired, TakenOver, Stopped, TakenOver, DeadlinePassed} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if revoke(r) {
				wins <- r
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []RevokeReason
	for r := range wins {
		won = append(won, r)
	}
	if len(won) != 1 {
		t.Fatalf("revoke succeeded %d times (%v), want exactly once", len(won), won)
	}
	<-tm.Done()
	if tm.Reason() != won[0] || tm.Valid() || tm.Remaining() != 0 {
		t.Fatalf("after revoke: Reason %v Valid %v Remaining %v, want %v false 0", tm.Reason(), tm.Valid(), tm.Remaining(), won[0])
	}
	if got := context.Cause(tm.Context()); got != won[0] {
		t.Fatalf("Cause(ctx) = %v, want %v", got, won[0])
	}
	if !errors.Is(context.Cause(tm.Context()), won[0]) {
		t.Fatal("errors.Is(Cause(ctx), reason) = false")
	}
}

func TestEnsureValid(t *testing.T) {
	life := &fakeLife{end: 5 * time.Second}
	tm, revoke := New(context.Background(), "jobs", 3, life)
	if err := tm.EnsureValid(time.Second); err != nil {
		t.Fatalf("EnsureValid(1s) with 5s left = %v, want nil", err)
	}
	err := tm.EnsureValid(5 * time.Second)
	var ee *ExpiredError
	if !errors.Is(err, ErrExpired) || !errors.As(err, &ee) || ee.Remaining != 5*time.Second || ee.Reason != 0 {
		t.Fatalf("EnsureValid(5s) with 5s left = %#v, want ErrExpired with Remaining 5s", err)
	}
	revoke(TakenOver)
	// Defect 3 of issue 9: 0 > -1ms let an ended term pass.
	for _, min := range []time.Duration{-time.Millisecond, math.MinInt64} {
		if err := tm.EnsureValid(min); !errors.Is(err, ErrExpired) {
			t.Fatalf("EnsureValid(%v) of an ended term = %v, want ErrExpired", min, err)
		}
	}
	err = tm.EnsureValid(0)
	if !errors.Is(err, ErrExpired) || !errors.Is(err, TakenOver) {
		t.Fatalf("EnsureValid after TAKEN_OVER = %v, want ErrExpired and TakenOver", err)
	}
	if want := "simba: term jobs#3 expired: simba: term revoked: TAKEN_OVER"; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestContextDerivesFromParent(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	tm, revoke := New(parent, "jobs", 1, &fakeLife{end: time.Hour})
	if tm.Context().Value(key{}) != "v" {
		t.Fatal("term context lost the parent's values")
	}
	if tm.Context().Err() != nil {
		t.Fatal("term context cancelled before revocation")
	}
	revoke(Stopped)
	if !errors.Is(tm.Context().Err(), context.Canceled) {
		t.Fatalf("ctx.Err() = %v, want Canceled", tm.Context().Err())
	}
}

func TestZeroTokenPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New with token 0 did not panic")
		}
	}()
	New(context.Background(), "x", 0, &fakeLife{})
}

func TestReasonText(t *testing.T) {
	for r := Stopped; r <= TakenOver; r++ {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back RevokeReason
		if err := json.Unmarshal(b, &back); err != nil || back != r {
			t.Fatalf("round trip of %v: %s -> %v, %v", r, b, back, err)
		}
	}
	if RevokeReason(9).String() != "RevokeReason(9)" {
		t.Fatalf("unknown reason String() = %q", RevokeReason(9).String())
	}
	var r RevokeReason
	if err := r.UnmarshalText([]byte("NOPE")); err == nil {
		t.Fatal("UnmarshalText(NOPE) = nil, want an error")
	}
	if !Stopped.Voluntary() || !SteppedDown.Voluntary() || DeadlinePassed.Voluntary() || TakenOver.Voluntary() || SessionExpired.Voluntary() {
		t.Fatal("Voluntary() wrong")
	}
	if tm, _ := New(context.Background(), "jobs", 42, &fakeLife{}); tm.String() != "jobs#42" || tm.Name() != "jobs" || tm.Token() != 42 {
		t.Fatalf("String/Name/Token = %q %q %d", tm.String(), tm.Name(), tm.Token())
	}
}
