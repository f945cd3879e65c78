package redissimba_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
)

func TestFencedSet(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		tag := "{" + namespace(t) + "}"
		fence, key := tag+":fence", tag+":data"
		t.Cleanup(func() { _ = c.Del(ctxT(t), fence, key).Err() })
		set := func(tok uint64, v string) error {
			return redissimba.FencedSet(ctxT(t), c, fence, key, tok, v, 0)
		}
		get := func() string {
			v, err := c.Get(ctxT(t), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		steps := []struct {
			tok     uint64
			val     string
			fenced  bool
			current string
		}{
			{9, "a", false, "a"},
			{9, "b", false, "b"},   // the same term writes again
			{10, "c", false, "c"},  // a later term
			{9, "old", true, "c"},  // the earlier term, woken up: refused
			{100, "d", false, "d"}, // longer decimal
			{99, "e", true, "d"},   // shorter decimal but numerically lower
			{math.MaxUint64, "f", false, "f"},
			{math.MaxUint64 - 1, "g", true, "f"}, // exact beyond 2^53
		}
		for _, s := range steps {
			err := set(s.tok, s.val)
			if s.fenced != errors.Is(err, redissimba.ErrFenced) || (!s.fenced && err != nil) {
				t.Fatalf("FencedSet(token %d) = %v, fenced want %v", s.tok, err, s.fenced)
			}
			if got := get(); got != s.current {
				t.Fatalf("after token %d: value %q, want %q", s.tok, got, s.current)
			}
		}
		if err := set(0, "x"); err == nil {
			t.Error("FencedSet with token 0 succeeded")
		}
		if err := redissimba.FencedSet(ctxT(t), c, fence, key, math.MaxUint64, "ttl", 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if ttl := c.PTTL(ctxT(t), key).Val(); ttl <= 0 || ttl > 50*time.Millisecond {
			t.Errorf("PTTL after a fenced set with ttl 50ms = %v", ttl)
		}
	})
}
