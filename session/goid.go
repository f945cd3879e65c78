package session

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// Blocking calls (Close, an election's Stop) must not wait when what they
// wait for depends on the caller. The contexts the engine hands out (a
// term's, so every leader task's) name the claim they belong to, which
// settles calls that take a context exactly and for free. io.Closer's
// Close takes none, and Go has no other way to tell "this goroutine is the
// callback Close would wait for": for those calls only, the goroutines
// running user callbacks and leader tasks are marked with their goroutine
// id, read from the stack header (about a microsecond), and so is the
// delivery loop's goroutine while it runs effects (whatever executor runs a
// callback inline there, ADR 0183). Nothing else on the engine's own paths
// is marked (backend calls, a drain with nothing to deliver, callbacks of
// elections without a user listener, such as a lock's), and the id is read
// back only while some goroutine is marked.
// docs/adr/0070-exact-self-wait.md explains the choice.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

// mark says what a marked goroutine is running: a callback or task of
// owner (a claim, or the key set with Claim.SetOwner; nil: something of the
// whole session), on the delivery loop (a Direct callback: everything the
// loop delivers waits for it) or not.
type mark struct {
	owner any
	loop  bool
}

// goroutines is the set of marked goroutines.
type goroutines struct {
	n   atomic.Int32 // how many marks exist: zero means nobody to look up
	mu  sync.Mutex
	ids map[uint64][]mark
}

func (g *goroutines) enter(m mark) uint64 {
	id := goid()
	g.mu.Lock()
	if g.ids == nil {
		g.ids = make(map[uint64][]mark)
	}
	g.ids[id] = append(g.ids[id], m)
	g.mu.Unlock()
	g.n.Add(1)
	return id
}

func (g *goroutines) exit(id uint64) {
	g.mu.Lock()
	ms := g.ids[id]
	if len(ms) <= 1 {
		delete(g.ids, id)
	} else {
		g.ids[id] = ms[:len(ms)-1]
	}
	g.mu.Unlock()
	g.n.Add(-1)
}

// current returns the marks of the calling goroutine.
func (g *goroutines) current() []mark {
	if g.n.Load() == 0 {
		return nil
	}
	id := goid()
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]mark(nil), g.ids[id]...)
}
