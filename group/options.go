package group

import (
	"context"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/term"
)

// Listener hears about the partitions a member owns. Every OnAssigned(p,
// t) is followed by exactly one OnRevoked(p, t, reason) for the same term.
// A group's callbacks run one at a time, in order, over its Executor, with
// no engine lock held; they may call Leave or Close, which then do not wait
// (they would wait for the callback itself) and return ErrWouldBlockSelf.
type Listener interface {
	OnAssigned(partition int, t *term.Term)
	OnRevoked(partition int, t *term.Term, reason term.RevokeReason)
}

// Funcs adapts a pair of functions to a Listener; a nil field is skipped.
type Funcs struct {
	Assigned func(partition int, t *term.Term)
	Revoked  func(partition int, t *term.Term, reason term.RevokeReason)
}

// OnAssigned calls f.Assigned.
func (f Funcs) OnAssigned(p int, t *term.Term) {
	if f.Assigned != nil {
		f.Assigned(p, t)
	}
}

// OnRevoked calls f.Revoked.
func (f Funcs) OnRevoked(p int, t *term.Term, r term.RevokeReason) {
	if f.Revoked != nil {
		f.Revoked(p, t, r)
	}
}

// Task is partition work: it runs for each term of each partition the
// member owns, under the term's context, cancelled (with the RevokeReason
// as its cause) when the term ends. When a partition moves voluntarily (a
// rebalance, Leave), its lease is kept until the task returns or the term's
// remaining time runs out, so the next owner's task never overlaps it.
type Task func(ctx context.Context, partition int, t *term.Term) error

// An Option configures a group member.
type Option func(*options)

type options struct {
	listener Listener
	exec     election.Executor
	tasks    []Task
	memberID string
	onError  func(error)
}

// WithListener sets the member's listener.
func WithListener(l Listener) Option { return func(o *options) { o.listener = l } }

// WithExecutor runs the member's callbacks on x instead of a goroutine
// each (see election.Executor; election.Direct runs them on the engine's
// goroutine). If x refuses an OnAssigned, nobody learned of the term: the
// partition is given back without OnRevoked and not taken again for one
// lease duration.
func WithExecutor(x election.Executor) Option {
	return func(o *options) {
		if x != nil {
			o.exec = x
		}
	}
}

// RunWhileOwner runs task for every term of every partition the member
// owns.
func RunWhileOwner(task Task) Option {
	return func(o *options) { o.tasks = append(o.tasks, task) }
}

// WithMemberID names the member in the group (1 to 32 characters of
// [A-Za-z0-9_-]); by default a random ID drawn from the session's Env. Two
// live members must never share an ID.
func WithMemberID(id string) Option { return func(o *options) { o.memberID = id } }

// OnError calls f, with the engine's lock held, when polling the members
// fails or a partition cannot be claimed (its name is already started on
// the session). For logging and tests; the member retries at its next
// tick.
func OnError(f func(error)) Option { return func(o *options) { o.onError = f } }
