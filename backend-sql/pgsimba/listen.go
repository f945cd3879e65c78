package pgsimba

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// Reconnection delays of the listening connection.
const (
	minListenBackoff = 50 * time.Millisecond
	maxListenBackoff = 5 * time.Second
)

// errShutdown is returned by Subscribe after Shutdown.
var errShutdown = errors.New("pgsimba: backend shut down")

// Subscribe implements [driver.Broadcaster]. The first subscriber starts
// one dedicated connection (taken from the pool and kept out of it) that
// LISTENs on [Channel]; the last stop closes it. Subscribe waits until
// LISTEN is in effect, at most [WithListenWait] (then candidates poll until
// it is, and a warning is logged). Every release or close in the namespace
// of a name that an acquire was refused since the name was last granted
// after a release (a name a candidate waits for, ADR 0162) is delivered
// with its lease name. Each time the connection is
// (re-)established, fn also gets an empty [driver.Notice], because
// notifications sent while nobody listened are lost: candidates then try
// at once instead of waiting for their next periodic attempt.
//
// fn runs on the listener's goroutine, one notice at a time. stop waits
// for a call of fn in progress and then guarantees no further call; fn
// must not call its own stop.
func (b *Backend) Subscribe(fn func(driver.Notice)) (stop func(), err error) {
	if fn == nil {
		return nil, errors.New("pgsimba: subscribe: nil function")
	}
	b.mu.Lock()
	if b.subs == nil {
		b.mu.Unlock()
		return nil, errShutdown
	}
	sub := &subscriber{fn: fn}
	id := b.next
	b.next++
	b.subs[id] = sub
	if b.stop == nil {
		b.stop, b.listening = b.startListener()
	}
	listening := b.listening
	b.mu.Unlock()
	// Wait, boundedly, for LISTEN to be in effect, so that a release after
	// Subscribe returns is heard. If the database does not answer in time,
	// the listener goes on trying and candidates poll meanwhile; its first
	// success sends every subscriber an empty notice.
	t := time.NewTimer(b.listenWait)
	select {
	case <-listening:
	case <-t.C:
		b.log.Warn("pgsimba: release notices not yet subscribed; candidates poll until they are", "waited", b.listenWait)
	}
	t.Stop()
	var once sync.Once
	return func() {
		once.Do(func() {
			sub.mu.Lock() // waits for a call in progress
			sub.stopped = true
			sub.mu.Unlock()
			b.mu.Lock()
			delete(b.subs, id)
			var stopListener func()
			if len(b.subs) == 0 {
				stopListener, b.stop = b.stop, nil
			}
			b.mu.Unlock()
			if stopListener != nil {
				stopListener()
			}
		})
	}, nil
}

// subscriber is one Subscribe call. Its own lock, held while fn runs,
// lets stop wait for a call in progress without holding the backend's
// lock during user code (fn may close other sessions, which unsubscribe).
type subscriber struct {
	mu      sync.Mutex
	fn      func(driver.Notice)
	stopped bool
}

func (b *Backend) dispatch(n driver.Notice) {
	b.mu.Lock()
	subs := make([]*subscriber, 0, len(b.subs))
	for _, s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		if !s.stopped {
			s.fn(n)
		}
		s.mu.Unlock()
	}
}

// startListener starts the listening goroutine; listening is closed once
// LISTEN is first in effect.
func (b *Backend) startListener() (stop func(), listening chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	listening = make(chan struct{})
	go func() {
		defer close(done)
		b.listen(ctx, sync.OnceFunc(func() { close(listening) }))
	}()
	return func() {
		cancel()
		<-done
	}, listening
}

// listen keeps one LISTEN connection up until ctx ends. Failures are
// logged, so that a listener that cannot work (candidates then only poll)
// is seen: once when it starts failing, once when it works again.
func (b *Backend) listen(ctx context.Context, listening func()) {
	backoff := minListenBackoff
	failing := false
	for ctx.Err() == nil {
		ok, err := b.listenOnce(ctx, func() {
			listening()
			if failing {
				failing = false
				b.log.Info("pgsimba: release notices subscribed again")
			}
		})
		if ok {
			backoff = minListenBackoff // it worked for a while: retry quickly
		}
		if err != nil && ctx.Err() == nil && !failing {
			failing = true
			b.log.Warn("pgsimba: release notices lost; candidates poll until the listener reconnects", "err", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxListenBackoff)
	}
}

// listenOnce takes a connection from the pool (so the pool's
// BeforeConnect and AfterConnect hooks, where rotated passwords and IAM
// tokens come from, apply to it), keeps it for itself (hijack: a LISTEN
// connection must not go back to the pool), listens and delivers notices
// until the connection fails or ctx ends. It reports whether LISTEN was
// established, and why it stopped.
func (b *Backend) listenOnce(ctx context.Context, established func()) (bool, error) {
	pc, err := b.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// A LISTEN connection is idle by nature: the server must not end it
	// for that (idle_session_timeout, PostgreSQL 14+, often set on a
	// role), or each timeout loses the notices sent until it is back and
	// wakes every subscriber. For this connection only, which never goes
	// back to the pool; a server without the setting skips it.
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.set_config('idle_session_timeout', '0', false) WHERE pg_catalog.current_setting('idle_session_timeout', true) IS NOT NULL"); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, b.channel); err != nil {
		return false, err
	}
	established()
	b.dispatch(driver.Notice{}) // whatever was sent before now is lost
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		b.dispatch(driver.Notice{Name: n.Payload})
	}
}
