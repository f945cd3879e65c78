package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/session/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewIDIs128RandomBits(t *testing.T) {
	seen := map[driver.ID]bool{}
	for range 1000 {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if !wellFormed(id) {
			t.Fatalf("NewID() = %q, not 32 lower-case hex digits", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestExpandValidates(t *testing.T) {
	if got, err := Expand("SELECT {p}_x FROM {p}_y", "app"); err != nil || got != "SELECT app_x FROM app_y" {
		t.Fatalf("Expand = %q, %v", got, err)
	}
	if _, err := Expand("{p}", "x;y"); !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
		t.Fatalf("Expand(bad prefix) = %v, want ErrInvalidPrefix", err)
	}
}

// FuzzExpand: whatever Expand accepts leaves no character outside the
// prefix alphabet where "{p}" stood.
func FuzzExpand(f *testing.F) {
	f.Add("app")
	f.Add("a'b")
	f.Fuzz(func(t *testing.T, prefix string) {
		got, err := Expand("<{p}>", prefix)
		if err != nil {
			return
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(got, "<"), ">")
		if strings.ContainsFunc(inner, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
		}) {
			t.Fatalf("Expand let %q into SQL", inner)
		}
	})
}

// fakeStore records calls, to check what the dialect-independent layer
// sends; real behaviour is tested against the servers.
type fakeStore struct {
	names        []string
	failures     int // Close fails with errDeadlock this many times
	closes       int
	leaseUS      int64 // the last Open's lease
	waitMS       int64 // the last call's lock-wait bound
	quarantineUS int64 // the last Acquire's quarantine length
	quarantined  int64 // if > 0, Acquire answers this quarantine
	delayUS      int64 // the last Acquire's lock-delay
	acquires     int   // calls of Acquire
}

var errDeadlock = errors.New("deadlock")

func (f *fakeStore) Open(_ context.Context, _ string, leaseUS int64, _ string, waitMS int64) (int64, error) {
	f.leaseUS, f.waitMS = leaseUS, waitMS
	return 1000, nil
}
func (f *fakeStore) Inspect(context.Context, []string, string) ([]HolderRow, error) {
	return nil, nil
}
func (f *fakeStore) Renew(context.Context, string, uint64, int64) (RenewResult, bool, error) {
	return RenewResult{}, false, nil
}
func (f *fakeStore) Acquire(_ context.Context, _ string, names []string, quarantineUS, waitMS, delayUS int64) (AcquireResult, bool, error) {
	f.names, f.quarantineUS, f.waitMS, f.delayUS = names, quarantineUS, waitMS, delayUS
	f.acquires++
	if f.quarantined > 0 {
		return AcquireResult{QuarantineUS: f.quarantined}, true, nil
	}
	out := make([]uint64, len(names))
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return AcquireResult{Tokens: out}, true, nil
}
func (f *fakeStore) Release(context.Context, string, []driver.Lease, int64) error { return nil }
func (f *fakeStore) Close(context.Context, string, int64) error {
	f.closes++
	if f.failures > 0 {
		f.failures--
		return errDeadlock
	}
	return nil
}

func TestDeadlockVictimsRunAgain(t *testing.T) {
	for _, tc := range []struct {
		failures, wantCalls int
		wantErr             bool
	}{{0, 1, false}, {1, 2, false}, {5, 6, false}, {maxAttempts + 2, maxAttempts, true}} {
		fs := &fakeStore{failures: tc.failures}
		b := Backend{Store: fs, Label: "test", Retryable: func(err error) bool { return errors.Is(err, errDeadlock) }}
		id, _ := NewID()
		err := b.Close(context.Background(), id)
		if fs.closes != tc.wantCalls || (err != nil) != tc.wantErr {
			t.Errorf("%d deadlocks: %d calls, err %v; want %d calls, error %v", tc.failures, fs.closes, err, tc.wantCalls, tc.wantErr)
		}
	}
}

func TestAcquireSortsDedupesAndMapsBack(t *testing.T) {
	fs := &fakeStore{}
	b := Backend{Store: fs, Label: "test"}
	id, _ := NewID()
	rep, err := b.Acquire(context.Background(), driver.AcquireRequest{ID: id, Names: []string{"c", "a", "bad name", "c", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(fs.names, ",") != "a,b,c" {
		t.Fatalf("store got %v, want [a b c]", fs.names)
	}
	want := []uint64{3, 1, 0, 3, 2}
	for i, r := range rep.Results {
		if r.Token != want[i] {
			t.Errorf("result %d (%s) token %d, want %d", i, r.Name, r.Token, want[i])
		}
	}
	if rep.Results[2].Err == nil {
		t.Error("invalid name got no error")
	}
	if _, err := b.Renew(context.Background(), driver.RenewRequest{ID: id}); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Renew of a session the store does not know = %v, want ErrExpired", err)
	}
	if _, err := b.Open(context.Background(), driver.OpenRequest{LeaseDuration: time.Microsecond}); err == nil {
		t.Error("Open with a lease under 1ms succeeded")
	}
}

// Every grant is capped at MaxLease (default 30s), the quarantine asked of
// the store is MaxLease, and a quarantine answer grants nothing.
func TestMaxLeaseAndQuarantine(t *testing.T) {
	fs := &fakeStore{}
	b := Backend{Store: fs, Label: "test"}
	ctx := context.Background()
	if _, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if fs.leaseUS != DefaultMaxLease.Microseconds() {
		t.Errorf("Open(1h) stored a lease of %dµs, want the default cap %v", fs.leaseUS, DefaultMaxLease)
	}
	b.MaxLease = 2 * time.Second
	if _, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Second}); err != nil || fs.leaseUS != 1e6 {
		t.Errorf("Open(1s) under a 2s cap stored %dµs (%v), want 1s", fs.leaseUS, err)
	}
	if _, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: 3 * time.Second}); err != nil || fs.leaseUS != 2e6 {
		t.Errorf("Open(3s) under a 2s cap stored %dµs (%v), want 2s", fs.leaseUS, err)
	}
	id, _ := NewID()
	fs.quarantined = 1500000
	rep, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if fs.quarantineUS != 2e6 {
		t.Errorf("Acquire asked for a quarantine of %dµs, want MaxLease (2s)", fs.quarantineUS)
	}
	if rep.Quarantine != 1500*time.Millisecond || len(rep.Results) != 2 || rep.Results[0].Token != 0 || rep.Results[1].Token != 0 {
		t.Errorf("Acquire during a quarantine = %+v, want Quarantine 1.5s and no token", rep)
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
		if CheckMaxLease("test", d) == nil {
			t.Errorf("CheckMaxLease(%v) accepted it", d)
		}
	}
}

// Each call's lock waits in the database are bounded by the time left to
// the caller's deadline, or MaxLease without one; at least 1 ms.
func TestLockWaitFollowsTheDeadline(t *testing.T) {
	fs := &fakeStore{}
	b := Backend{Store: fs, Label: "test", MaxLease: 7 * time.Second}
	if got := b.lockWait(context.Background()); got != 7000 {
		t.Errorf("lockWait without a deadline = %dms, want MaxLease (7000)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if got := b.lockWait(ctx); got < 2900 || got > 3000 {
		t.Errorf("lockWait 3s before the deadline = %dms, want about 3000", got)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if got := b.lockWait(past); got != 1 {
		t.Errorf("lockWait after the deadline = %dms, want 1", got)
	}
	id, _ := NewID()
	if _, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"a"}}); err != nil || fs.waitMS < 2900 || fs.waitMS > 3000 {
		t.Errorf("Acquire passed a lock wait of %dms (%v), want about 3000", fs.waitMS, err)
	}
}

// A lock-delay above WithMaxLockDelay (0 by default) or below 0 is
// refused whole, naming the maximum and the option, before the store is
// asked; one within it reaches the store in µs (rounded up); the
// quarantine after a loss is MaxLease + MaxLockDelay (ADR 0251).
func TestLockDelayBoundsAndQuarantine(t *testing.T) {
	fs := &fakeStore{}
	b := Backend{Store: fs, Label: "test", MaxLease: 2 * time.Second}
	ctx := context.Background()
	id, _ := NewID()
	for _, c := range []struct {
		max, delay time.Duration
	}{{0, time.Millisecond}, {time.Second, time.Second + 1}, {time.Second, -time.Nanosecond}} {
		b.MaxLockDelay = c.max
		_, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"a"}, LockDelay: c.delay})
		if !errors.Is(err, driver.ErrLockDelay) || !strings.Contains(err.Error(), "WithMaxLockDelay") || !strings.Contains(err.Error(), c.max.String()) {
			t.Errorf("max %v, delay %v: err = %v, want one wrapping ErrLockDelay naming WithMaxLockDelay and %v", c.max, c.delay, err, c.max)
		}
	}
	if fs.acquires != 0 {
		t.Fatalf("the store was asked %d times for refused delays", fs.acquires)
	}
	b.MaxLockDelay = 3 * time.Second
	if _, err := b.Acquire(ctx, driver.AcquireRequest{ID: id, Names: []string{"a"}, LockDelay: 1500*time.Microsecond + 1}); err != nil {
		t.Fatal(err)
	}
	if fs.delayUS != 1501 || fs.quarantineUS != 5e6 {
		t.Errorf("store got delay %dµs and quarantine %dµs, want 1501 (rounded up) and 5000000 (MaxLease + MaxLockDelay)", fs.delayUS, fs.quarantineUS)
	}
	if CheckMaxLockDelay("test", -time.Second) == nil || CheckMaxLockDelay("test", 0) != nil {
		t.Error("CheckMaxLockDelay: want -1s refused and 0 accepted")
	}
}
