package backendtest

import (
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// broadcastCases check the optional driver.Broadcaster.
var broadcastCases = []testCase{
	{
		name:    "BroadcastOnRelease",
		promise: "a Broadcaster tells a subscribed client of the same namespace, within a bounded time, about a name released or freed by Close, once that client's Acquire of it failed; stop waits until fn is no longer called",
		f:       broadcast,
	},
}

func broadcast(e *env) {
	watcher := e.client()
	bc, ok := watcher.(driver.Broadcaster)
	switch {
	case e.cfg.Polls && ok:
		e.t.Fatalf("%T implements driver.Broadcaster but Config.Polls says it does not broadcast", watcher)
	case e.cfg.Polls:
		return // a polling backend: candidates find free leases on their next attempt
	case !ok:
		e.t.Fatalf("%T does not implement driver.Broadcaster; set Config.Polls if the backend only polls", watcher)
	}
	notices := make(chan driver.Notice, 256)
	var stopped atomic.Bool
	var late atomic.Int32
	stop, err := bc.Subscribe(func(n driver.Notice) {
		if stopped.Load() {
			late.Add(1)
		}
		select {
		case notices <- n:
		default: // a full buffer loses a hint, which is allowed
		}
	})
	if err != nil {
		e.t.Fatalf("Subscribe: %v", err)
	}
	w := e.openOn(watcher)
	holder := e.open()
	expect := func(name, after string) {
		e.t.Helper()
		timer := time.NewTimer(e.cfg.NoticeTimeout)
		defer timer.Stop()
		for {
			select {
			case n := <-notices:
				if n.Name == name {
					return
				}
			case <-timer.C:
				e.errorf("no Notice{%q} within %v after %s", name, e.cfg.NoticeTimeout, after)
				return
			}
		}
	}
	tx := holder.mustAcquire("x")
	if tok := w.acquire("x"); tok != 0 {
		e.fatalf("watcher acquired a held name (token %d)", tok)
	}
	holder.release(driver.Lease{Name: "x", Token: tx})
	expect("x", "the holder released it")

	holder.mustAcquire("y")
	if tok := w.acquire("y"); tok != 0 {
		e.fatalf("watcher acquired a held name (token %d)", tok)
	}
	holder.close()
	expect("y", "the holder closed its session")

	stop()
	stopped.Store(true)
	h2 := e.open()
	tz := h2.mustAcquire("z")
	h2.release(driver.Lease{Name: "z", Token: tz})
	if n := late.Load(); n > 0 {
		e.errorf("fn was called %d times after stop returned", n)
	}
}
