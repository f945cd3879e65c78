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
	names    []string
	failures int // Close fails with errDeadlock this many times
	closes   int
}

var errDeadlock = errors.New("deadlock")

func (f *fakeStore) Open(context.Context, string, int64, string) (int64, error) { return 1000, nil }
func (f *fakeStore) Inspect(context.Context, []string, string) ([]HolderRow, error) {
	return nil, nil
}
func (f *fakeStore) Renew(context.Context, string, uint64) (RenewResult, bool, error) {
	return RenewResult{}, false, nil
}
func (f *fakeStore) Acquire(_ context.Context, _ string, names []string) ([]uint64, bool, error) {
	f.names = names
	out := make([]uint64, len(names))
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out, true, nil
}
func (f *fakeStore) Release(context.Context, string, []driver.Lease) error { return nil }
func (f *fakeStore) Close(context.Context, string) error {
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
	}{{0, 1, false}, {1, 2, false}, {2, 3, false}, {5, 3, true}} {
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
