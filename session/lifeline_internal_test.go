package session

import (
	"testing"
	"time"
)

// clockEnv is an Env whose clock the test sets; nothing else is used.
type clockEnv struct {
	Env
	now time.Time
}

func (e *clockEnv) Now() time.Time { return e.now }

// A deadline that passed stays passed even if nobody looked at it before
// a late reply tried to extend it: the reply is judged against the clock
// when it arrives, not against what a reader happened to see. (Found by
// the mutation gate: the engine's deadline timer usually reads it first,
// hiding a lifeline that only stays over once observed.)
func TestLifelinePassedUnobservedIsNotExtended(t *testing.T) {
	env := &clockEnv{now: time.Unix(1000, 0)}
	l := newLifeline(env, env.now.Add(10*time.Second))
	env.now = env.now.Add(11 * time.Second) // passed, and nobody read it
	if l.extend(env.now.Add(10 * time.Second)) {
		t.Fatal("extend revived a lifeline whose deadline had passed")
	}
	if r := l.Remaining(); r != 0 {
		t.Fatalf("Remaining() = %v after a late extension, want 0", r)
	}
}

// A lifeline ended by end() (expiry, Close) never comes back, whatever
// the clock says.
func TestLifelineEndedStaysEnded(t *testing.T) {
	env := &clockEnv{now: time.Unix(1000, 0)}
	l := newLifeline(env, env.now.Add(10*time.Second))
	l.end()
	if r := l.Remaining(); r != 0 {
		t.Fatalf("Remaining() = %v after end, want 0", r)
	}
	if l.extend(env.now.Add(10 * time.Second)) {
		t.Fatal("extend revived an ended lifeline")
	}
}
