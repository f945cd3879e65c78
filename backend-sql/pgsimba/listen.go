package pgsimba

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

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
// one dedicated connection (outside the pool) that LISTENs on [Channel];
// the last stop closes it. Every release or close in the namespace is
// delivered with its lease name. Each time the connection is
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
	defer b.mu.Unlock()
	if b.subs == nil {
		return nil, errShutdown
	}
	sub := &subscriber{fn: fn}
	id := b.next
	b.next++
	b.subs[id] = sub
	if b.stop == nil {
		b.stop = b.startListener()
	}
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

func (b *Backend) startListener() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.listen(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// listen keeps one LISTEN connection up until ctx ends.
func (b *Backend) listen(ctx context.Context) {
	backoff := minListenBackoff
	for ctx.Err() == nil {
		if b.listenOnce(ctx) {
			backoff = minListenBackoff // it worked for a while: retry quickly
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

// listenOnce connects, listens and delivers notices until the connection
// fails or ctx ends. It reports whether LISTEN was established.
func (b *Backend) listenOnce(ctx context.Context) bool {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, b.q.channel); err != nil {
		return false
	}
	b.dispatch(driver.Notice{}) // whatever was sent before now is lost
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		b.dispatch(driver.Notice{Name: n.Payload})
	}
}
