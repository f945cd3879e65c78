package session

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Env is the world the engine runs in: its clock, its timers, the way it
// starts goroutines and its source of jitter. The default is the running
// process ([time.Now], [time.AfterFunc], goroutines, a randomly seeded
// generator). Tests and the seeded simulation pass a virtual Env so that
// every lifecycle rule is checked on virtual time, deterministically.
//
// The engine calls Env methods with its lock held: they must not call back
// into the engine synchronously. Functions passed to AfterFunc and Go are
// run later, each on its own (real or simulated) goroutine.
type Env interface {
	// Now reads the node's monotonic clock.
	Now() time.Time
	// AfterFunc runs f once, d from now, unless stop is called first. stop
	// reports whether it prevented f from running.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
	// Go runs f on another goroutine.
	Go(f func())
	// Call runs a backend call: op on another goroutine, then reply once op
	// has returned. The system Env runs both on one goroutine; a simulated
	// network may delay reply, drop it (the engine's own timeout then acts)
	// or reorder it with other replies.
	Call(op, reply func())
	// Jitter returns a random number in [0, 1).
	Jitter() float64
}

// SystemEnv returns the Env of the running process.
func SystemEnv() Env {
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	return &systemEnv{rng: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))}
}

type systemEnv struct {
	mu  sync.Mutex
	rng *mrand.Rand
}

func (*systemEnv) Now() time.Time { return time.Now() }

func (*systemEnv) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

func (*systemEnv) Go(f func()) { go f() }

func (*systemEnv) Call(op, reply func()) {
	go func() {
		op()
		reply()
	}()
}

func (e *systemEnv) Jitter() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.Float64()
}
