package etcdsimba

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/session/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watcher is the backend's one watch on its namespace's lease keys
// (ADR 0210): every delete (a release, a Close's revocation, an etcd lease
// expired by the server) reaches subscribers as a [driver.Notice] and
// drops the name from its owner's owned set. It runs from the first Open
// or Subscribe until Shutdown.
type watcher struct {
	b *Backend

	mu      sync.Mutex
	started bool
	shut    bool
	cancel  context.CancelFunc
	done    chan struct{}
	ready   chan struct{} // closed once a watch has been created
	again   chan struct{} // cap 1: restart from the current revision
	subs    map[int]*subscriber
	next    int
	loopGID atomic.Uint64

	delivering sync.Mutex // held while one notice is delivered
}

type subscriber struct {
	fn      func(driver.Notice)
	stopped atomic.Bool
}

func (w *watcher) init(b *Backend) {
	w.b = b
	w.ready = make(chan struct{})
	w.again = make(chan struct{}, 1)
	w.subs = make(map[int]*subscriber)
}

// ensure starts the watch loop if it is not running.
func (w *watcher) ensure() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.shut {
		return
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go w.loop(ctx, w.done)
}

// restart makes the loop watch again from the current revision: after the
// store went back, a watch resumed from the revision after the last one
// seen would wait silently for the store to catch up.
func (w *watcher) restart() {
	select {
	case w.again <- struct{}{}:
	default:
	}
}

func (w *watcher) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	w.loopGID.Store(goid())
	b := w.b
	var rev int64 // 0: from now
	missed := false
	for pause := time.Duration(0); ctx.Err() == nil; {
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		// WithRequireLeader: a member cut off from its leader cancels the
		// watch instead of leaving it silent; the loop then watches again,
		// through whichever member the client reaches.
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		wch := b.cli.Watch(wctx, b.k.lease, opts...)
		healthy := w.run(ctx, wch, &rev, &missed)
		wcancel()
		if ctx.Err() != nil {
			return
		}
		// Deletes may be missed until the next watch exists: its creation
		// delivers an empty notice (run), so that a waiter's attempt comes
		// after the point from which the new watch reports deletes.
		missed = true
		if healthy {
			pause = 0
		} else {
			pause = min(max(2*pause, 50*time.Millisecond), time.Second)
		}
	}
}

// run reads one watch until it ends; true if it delivered anything.
func (w *watcher) run(ctx context.Context, wch clientv3.WatchChan, rev *int64, missed *bool) bool {
	b := w.b
	healthy := false
	for {
		select {
		case <-ctx.Done():
			return healthy
		case <-w.again:
			*rev = 0
			return true
		case resp, ok := <-wch:
			if !ok {
				return healthy
			}
			if resp.Created {
				w.mu.Lock()
				select {
				case <-w.ready:
				default:
					close(w.ready)
				}
				w.mu.Unlock()
				if *missed {
					*missed = false
					w.deliver(driver.Notice{})
				}
			}
			if resp.CompactRevision != 0 {
				*rev = 0 // the revisions missed are compacted: from now on
			}
			if err := resp.Err(); err != nil {
				b.cfg.logger.Debug("etcdsimba: namespace watch ended; watching again", "namespace", b.ns, "err", err)
				return healthy
			}
			healthy = true
			for _, ev := range resp.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), b.k.lease)
				if ev.Type == mvccpb.PUT {
					b.put(name, ev.Kv)
					continue
				}
				b.deleted(name, ev.Kv.ModRevision)
				w.deliver(driver.Notice{Name: name})
			}
			if resp.Header.Revision > 0 {
				*rev = resp.Header.Revision + 1
			}
		}
	}
}

func (w *watcher) deliver(n driver.Notice) {
	w.delivering.Lock()
	defer w.delivering.Unlock()
	w.mu.Lock()
	subs := make([]*subscriber, 0, len(w.subs))
	for _, s := range w.subs {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	for _, s := range subs {
		if !s.stopped.Load() {
			s.fn(n)
		}
	}
}

// Subscribe delivers a [driver.Notice] for every lease key of the
// namespace deleted (released, revoked by Close, or expired by the server
// with its etcd lease), and an empty notice whenever the watch had to be
// re-established. It returns once the watch is in place (or after 5 s
// without one: notices are hints). fn runs on the backend's watch
// goroutine and must not block; it may stop any subscription, its own
// included.
func (b *Backend) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: Subscribe(nil)", ErrInvalidOption)
	}
	w := &b.w
	sub := &subscriber{fn: fn}
	w.mu.Lock()
	if w.shut {
		w.mu.Unlock()
		return nil, fmt.Errorf("etcdsimba: subscribe: %w", driver.ErrClosed)
	}
	id := w.next
	w.next++
	w.subs[id] = sub
	ready := w.ready
	w.mu.Unlock()
	w.ensure()
	t := time.NewTimer(5 * time.Second)
	select {
	case <-ready:
	case <-t.C:
		b.cfg.logger.Warn("etcdsimba: the namespace watch is not established yet; release notices may be late", "namespace", b.ns)
	}
	t.Stop()
	var once sync.Once
	return func() {
		once.Do(func() {
			sub.stopped.Store(true)
			w.mu.Lock()
			delete(w.subs, id)
			w.mu.Unlock()
			if w.loopGID.Load() != goid() {
				// Wait out a delivery in progress, unless this is it.
				w.waitDelivery()
			}
		})
	}, nil
}

// waitDelivery returns once no notice is being delivered.
func (w *watcher) waitDelivery() {
	w.delivering.Lock()
	defer w.delivering.Unlock() // taken only to wait for the holder
}

// shutdown stops the loop and every subscription.
func (w *watcher) shutdown(ctx context.Context) error {
	w.mu.Lock()
	w.shut = true
	for _, s := range w.subs {
		s.stopped.Store(true)
	}
	clear(w.subs)
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("etcdsimba: shutdown: the watch loop: %w", context.Cause(ctx))
	}
}
