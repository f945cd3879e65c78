package group

import (
	"context"
	"time"

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

// MismatchListener is implemented by a Listener that wants to hear when
// the group's live members were configured with different partition
// counts (a rolling deploy that changes it): counts names each member's
// ("a=12 b=16"), agreed is the count the group serves meanwhile, the
// smallest (ADR 0189). Every member hears it, in order with its other
// callbacks, each time the disagreement changes; OnError gets an error
// wrapping ErrPartitionsMismatch as well.
type MismatchListener interface {
	OnPartitionsMismatch(agreed int, counts string)
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
// as its cause) when the term ends. It starts when the term begins, not
// after the term's OnAssigned: a slow callback delays the others'
// callbacks, never their tasks (ADR 0101, ADR 0192). When a partition moves voluntarily (a
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

	lockDelay time.Duration
}

// WithListener sets the member's listener.
func WithListener(l Listener) Option { return func(o *options) { o.listener = l } }

// WithExecutor runs the member's callbacks on x instead of a goroutine
// each (see election.Executor; election.Direct runs them on the engine's
// goroutine). If x refuses an OnAssigned, the listener never learns of the
// term: the partition is handed over (its tasks cancelled and waited for,
// as in any voluntary handover), without OnRevoked, and not taken again
// for one lease duration.
func WithExecutor(x election.Executor) Option {
	return func(o *options) {
		if x != nil {
			o.exec = x
		}
	}
}

// RunWhileOwner runs task for every term of every partition the member
// owns. Join refuses a nil task (ErrInvalidGroup).
func RunWhileOwner(task Task) Option {
	return func(o *options) { o.tasks = append(o.tasks, task) }
}

// WithMemberID names the member in the group (1 to 32 characters of
// [A-Za-z0-9_-]); by default a random ID drawn from the session's Env. Two
// live members must never share an ID.
func WithMemberID(id string) Option { return func(o *options) { o.memberID = id } }

// WithLockDelay asks the backend to keep a partition's lease refused to
// every session for d after a term of it ends without a release: its
// member's session expired, or its deadline passed (see
// election.WithLockDelay; ADR 0240). Rebalances and Leave hand partitions
// over with a release and skip it, and so does closing the session; the
// member lease itself has no delay, so the others see a dead member as
// soon as today, and take its partitions once their delays have passed.
// A delay above the backend's WithMaxLockDelay is refused: the partitions
// stop competing, OnError gets an error wrapping session.ErrLockDelay
// (once, until a partition is won) and the session publishes
// LockDelayRefused. A negative d makes Join fail (ErrInvalidGroup).
// Default 0: no delay.
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = d } }

// OnError calls f when polling the members fails, when the member
// withdraws because it could not see the group for a lease duration
// (ErrBlind), when the members disagree on the partition count
// (ErrPartitionsMismatch), or when a partition cannot be claimed (its
// name is already started on the session). It runs with no lock held, in
// order, on the session's delivery loop: it may call Snapshot, Terms or
// the session's State, and Leave or Close from it return
// ErrWouldBlockSelf (they would wait for the loop it holds). For logging
// and tests; the member retries at its next tick (except a refused
// lock-delay, WithLockDelay).
func OnError(f func(error)) Option { return func(o *options) { o.onError = f } }
