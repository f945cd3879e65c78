package pgsimba

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/session"
)

// Reconnection delays of the listening connection.
const (
	minListenBackoff = 50 * time.Millisecond
	maxListenBackoff = 5 * time.Second
)

// errShutdown is returned by Subscribe after Shutdown.
var errShutdown = errors.New("pgsimba: backend shut down")

// Subscribe implements [session.Broadcaster]. The first subscriber starts
// one dedicated connection (outside the pool) that LISTENs on [Channel];
// the last stop closes it. Every release or close in the namespace is
// delivered with its lease name. Each time the connection is
// (re-)established, fn also gets an empty [session.Notice], because
// notifications sent while nobody listened are lost: candidates then try
// at once instead of waiting for their next periodic attempt.
func (b *Backend) Subscribe(fn func(session.Notice)) (stop func(), err error) {
	if fn == nil {
		return nil, errors.New("pgsimba: subscribe: nil function")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		return nil, errShutdown
	}
	id := b.next
	b.next++
	b.subs[id] = fn
	if b.stop == nil {
		b.stop = b.startListener()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, id)
			var stopListener func()
			if len(b.subs) == 0 {
				stopListener, b.stop = b.stop, nil
			}
			b.mu.Unlock()
			// Delivery holds b.mu, so fn is not called after the delete.
			if stopListener != nil {
				stopListener()
			}
		})
	}, nil
}

func (b *Backend) dispatch(n session.Notice) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fn := range b.subs {
		fn(n)
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
	b.dispatch(session.Notice{}) // whatever was sent before now is lost
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		b.dispatch(session.Notice{Name: n.Payload})
	}
}
