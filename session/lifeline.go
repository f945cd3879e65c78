package session

import (
	"sync"
	"time"
)

// lifeline is the local deadline of one backend session. It implements
// term.Lifeline: once the deadline has been seen to pass, it stays passed,
// and no later renewal reply can move it again. The clock is read under the
// same lock that extends the deadline, so a reader that saw it passed can
// never see it alive afterwards.
type lifeline struct {
	env      Env
	mu       sync.Mutex
	deadline time.Time
	over     bool
}

func newLifeline(env Env, deadline time.Time) *lifeline {
	l := &lifeline{env: env, deadline: deadline}
	l.Remaining() // a grant already spent is over from the start
	return l
}

// Remaining is the time left until the deadline; zero or less once passed.
func (l *lifeline) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over {
		return 0
	}
	r := l.deadline.Sub(l.env.Now())
	if r <= 0 {
		l.over = true
		return 0
	}
	return r
}

// extend moves the deadline to d, reporting false (and moving nothing) if
// the deadline has already passed: a late reply never revives a session.
func (l *lifeline) extend(d time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.env.Now()
	if l.over || !now.Before(l.deadline) {
		l.over = true
		return false
	}
	l.deadline = d
	if !now.Before(d) {
		l.over = true
		return false
	}
	return true
}

// AfterFunc runs f after d on the session's clock: a lifeline is a
// term.Timer, so a term's ContextBefore follows the engine's clock.
func (l *lifeline) AfterFunc(d time.Duration, f func()) func() bool { return l.env.AfterFunc(d, f) }

// end ends the lifeline at once (the session expired or was closed).
func (l *lifeline) end() {
	l.mu.Lock()
	l.over = true
	l.mu.Unlock()
}

// at is the deadline's instant on the node's clock.
func (l *lifeline) at() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}
