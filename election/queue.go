package election

import (
	"errors"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/serial"
)

// Executor runs callbacks. Execute may refuse a callback by returning an
// error (a saturated pool, a shutting-down runtime). A refused OnElected
// does not run (the election steps down, and that term's OnRevoked is not
// delivered either); a refused OnRevoked of a term whose OnElected ran is
// run anyway, on the goroutine delivering it, so that the listener always
// learns that its term ended.
type Executor interface {
	Execute(f func()) error
}

// ExecutorFunc adapts a function to an Executor.
type ExecutorFunc func(f func()) error

// Execute calls fn(f).
func (fn ExecutorFunc) Execute(f func()) error { return fn(f) }

// Direct is an Executor that runs callbacks on the goroutine that delivers
// them: the engine's. Callbacks must then not block; to wait for a Stop or
// StepDown, chain on what they return instead of blocking.
type Direct struct{}

// Execute runs f at once.
func (Direct) Execute(f func()) error { f(); return nil }

// Goroutines is the default Executor: each callback runs on a new
// goroutine (one at a time per election, by the serial queue).
type Goroutines struct{}

// Execute runs f on a new goroutine.
func (Goroutines) Execute(f func()) error { go f(); return nil }

// ErrRefused wraps an executor's refusal.
var ErrRefused = errors.New("simba: executor refused the callback")

// newQueue returns the serial queue of one election's callbacks (package
// internal/serial, shared with group): one at a time, in order, over exec,
// with no engine lock held. quiet: no user listener, so callbacks run
// unmarked.
func newQueue(eng layer.Engine, exec Executor, quiet bool) *serial.Queue {
	_, direct := exec.(Direct)
	return serial.New(serial.Config{Engine: eng, Executor: exec, Direct: direct, Quiet: quiet, ErrRefused: ErrRefused})
}
