package session

import (
	"context"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session/driver"
)

// WatchNotices calls fn for every release notice the backend pushes to the
// session, until stop is called; it reports false (and never calls fn) if
// the backend does not broadcast. Observers use it to look again as soon as
// a lease may have changed hands instead of waiting for their next poll.
// fn runs on the backend's delivery goroutine: it must not block. A notice
// is a hint and may cover only names the session itself competes for, so a
// watcher still polls.
func (s *Session) WatchNotices(fn func(Notice)) (stop func(), ok bool) {
	// The backend, not s.unsub: a deferred session subscribes only on Start.
	if _, ok := s.b.(driver.Broadcaster); !ok {
		return func() {}, false
	}
	key := &fn
	s.watchMu.Lock()
	s.watchers[key] = struct{}{}
	s.watchMu.Unlock()
	return func() {
		s.watchMu.Lock()
		delete(s.watchers, key)
		s.watchMu.Unlock()
	}, true
}

// tellWatchers passes a notice to the WatchNotices callbacks.
func (s *Session) tellWatchers(n Notice) {
	s.watchMu.Lock()
	fns := make([]func(Notice), 0, len(s.watchers))
	for f := range s.watchers {
		fns = append(fns, *f)
	}
	s.watchMu.Unlock()
	for _, f := range fns {
		f(n)
	}
}

// setState changes the state, remembering when it last changed. Lock held.
func (s *Session) setState(st State) {
	if st != s.state {
		s.state = st
		s.since = s.env.Now()
	}
}

// StateSince is how long the session has been in its current state, on
// the Env's clock: a health check's "SUSPENDED for too long".
func (s *Session) StateSince() (State, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.env.Now().Sub(s.since)
}

// termParent is the parent context of a new term. Lock held.
func (s *Session) termParent(c *claim, elected Event) context.Context {
	// The marker says whose term it is (self-waits); the engine lets the
	// layers built on the session find it from the term's context.
	ctx := layer.WithEngineValue(s.root, hooks{s}, markerKey{}, c)
	if s.termCtx != nil {
		elected.Time = s.env.Now()
		if d := s.termCtx(ctx, elected); d != nil && d.Value(markerKey{}) == c {
			ctx = d // a context not derived from ctx would lose the term's marker
		}
	}
	return ctx
}
