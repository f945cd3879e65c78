package serial_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/serial"
)

// engine is the part of a layer.Engine a queue uses: Hold and Inside.
type engine struct {
	layer.Engine
	mu    sync.Mutex
	held  int
	loops []bool // Inside's loop argument, per callback
}

func (e *engine) Hold() func() {
	e.mu.Lock()
	e.held++
	e.mu.Unlock()
	return func() { e.mu.Lock(); e.held--; e.mu.Unlock() }
}

func (e *engine) Inside(_ any, loop bool, f func()) {
	e.mu.Lock()
	e.loops = append(e.loops, loop)
	e.mu.Unlock()
	f()
}

type direct struct{}

func (direct) Execute(f func()) error { f(); return nil }

// refuser refuses every callback.
type refuser struct{}

var errFull = errors.New("full")

func (refuser) Execute(func()) error { return errFull }

var errRefused = errors.New("refused")

func TestOrderAndHold(t *testing.T) {
	e := &engine{}
	q := serial.New(serial.Config{Engine: e, Executor: direct{}, Direct: true, ErrRefused: errRefused})
	var got []int
	for i := range 3 {
		q.Push(func() { got = append(got, i) }, nil)
	}
	q.WhenIdle(func() { got = append(got, 99) })
	if want := []int{0, 1, 2, 99}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if e.held != 0 {
		t.Fatalf("%d holds left after the callbacks ran", e.held)
	}
	if !slices.Equal(e.loops, []bool{true, true, true}) {
		t.Fatalf("Inside loop flags %v, want true for a direct executor", e.loops)
	}
}

func TestGoroutinesKeepOrder(t *testing.T) {
	e := &engine{}
	q := serial.New(serial.Config{Engine: e, Executor: goroutines{}, ErrRefused: errRefused})
	var mu sync.Mutex
	var got []int
	done := make(chan struct{})
	for i := range 50 {
		q.Push(func() { mu.Lock(); got = append(got, i); mu.Unlock() }, nil)
	}
	q.WhenIdle(func() { close(done) })
	<-done
	for i, v := range got {
		if v != i {
			t.Fatalf("callbacks ran in order %v", got)
		}
	}
}

type goroutines struct{}

func (goroutines) Execute(f func()) error { go f(); return nil }

func TestRefusals(t *testing.T) {
	e := &engine{}
	q := serial.New(serial.Config{Engine: e, Executor: refuser{}, ErrRefused: errRefused})
	var refusal error
	ran := false
	q.Push(func() { ran = true }, func(err error) { refusal = err })
	if ran || !errors.Is(refusal, errRefused) || !errors.Is(refusal, errFull) {
		t.Fatalf("refused Push: ran %v, refusal %v; want not run and the refusal wrapping both errors", ran, refusal)
	}
	// A callback that must run (an OnRevoked whose OnAssigned ran) runs in
	// place, marked as on the delivery loop.
	q.PushMustRun(func() { ran = true })
	if !ran || !slices.Equal(e.loops, []bool{true}) {
		t.Fatalf("refused PushMustRun: ran %v, Inside loop flags %v; want run on the loop", ran, e.loops)
	}
	if e.held != 0 {
		t.Fatalf("%d holds left after refusals", e.held)
	}
}

func TestCloseDropsLaterPushes(t *testing.T) {
	e := &engine{}
	q := serial.New(serial.Config{Engine: e, Executor: direct{}, Direct: true})
	q.Close()
	ran := false
	q.Push(func() { ran = true }, nil)
	q.PushMustRun(func() { ran = true })
	q.WhenIdle(func() { ran = true })
	if ran {
		t.Fatal("a push after Close ran")
	}
}

func TestQuietRunsUnmarked(t *testing.T) {
	e := &engine{}
	q := serial.New(serial.Config{Engine: e, Executor: direct{}, Direct: true, Quiet: true})
	ran := false
	q.Push(func() { ran = true }, nil)
	if !ran || len(e.loops) != 0 {
		t.Fatalf("quiet queue: ran %v, marked %d times; want run unmarked", ran, len(e.loops))
	}
}
