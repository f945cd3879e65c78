package session

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

// Blocking calls (Close, an election's Stop) must not wait when called from
// a callback or a leader task, because that would be waiting for oneself.
// Where a context is passed, the contexts the engine hands out carry a
// marker; where none is (io.Closer), the engine recognises the goroutines
// that run its callbacks and tasks. Go has no public goroutine identity, so
// it reads the id from the goroutine's stack header; this costs about a
// microsecond and happens only when callbacks start and blocking calls
// begin. docs/adr/0005-self-wait.md explains the choice.
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

// goroutines is a set of goroutine ids running engine-owned code.
type goroutines struct {
	mu  sync.Mutex
	ids map[uint64]int
}

func (g *goroutines) enter() uint64 {
	id := goid()
	g.mu.Lock()
	if g.ids == nil {
		g.ids = make(map[uint64]int)
	}
	g.ids[id]++
	g.mu.Unlock()
	return id
}

func (g *goroutines) exit(id uint64) {
	g.mu.Lock()
	if g.ids[id]--; g.ids[id] <= 0 {
		delete(g.ids, id)
	}
	g.mu.Unlock()
}

func (g *goroutines) current() bool {
	g.mu.Lock()
	n := len(g.ids)
	g.mu.Unlock()
	if n == 0 {
		return false
	}
	id := goid()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ids[id] > 0
}
