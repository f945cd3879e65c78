package layer_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/layer"
)

// fake is an Engine a test builds by hand; host embeds a Link the way
// session.Session does.
type fake struct{ layer.Engine }

type host struct {
	layer.Link
}

type lookalike struct{}

// link has the name of Link's method, but it is declared in another
// package, so it does not satisfy the layer's interface.
func (lookalike) link() *layer.Link { return &layer.Link{} }

func TestOf(t *testing.T) {
	var h host
	if _, ok := layer.Of(&h); ok {
		t.Fatal("Of(unbound host) = ok, want false: nothing was bound")
	}
	e := fake{}
	layer.Bind(&h.Link, e)
	got, ok := layer.Of(&h)
	if !ok || got != layer.Engine(e) {
		t.Fatalf("Of(bound host) = %v, %v; want the bound engine", got, ok)
	}
	for _, v := range []any{nil, 42, lookalike{}, h} {
		if _, ok := layer.Of(v); ok {
			t.Fatalf("Of(%T) = ok, want false", v)
		}
	}
	_ = lookalike{}.link() // keep the method used
}

func TestMustOfPanicsOnStrangers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustOf(42) did not panic")
		}
	}()
	layer.MustOf(42)
}

func TestFromContext(t *testing.T) {
	if _, ok := layer.FromContext(context.Background()); ok {
		t.Fatal("FromContext(Background) = ok, want false")
	}
	//lint:ignore SA1012 a nil context is what the function must survive
	if _, ok := layer.FromContext(nil); ok {
		t.Fatal("FromContext(nil) = ok, want false")
	}
	e := fake{}
	ctx, cancel := context.WithTimeout(layer.WithEngine(context.Background(), e), time.Hour)
	defer cancel()
	if got, ok := layer.FromContext(ctx); !ok || got != layer.Engine(e) {
		t.Fatalf("FromContext(derived) = %v, %v; want the engine", got, ok)
	}
}
