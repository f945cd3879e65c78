package gocronsimba

import "time"

// Option configures [Elector] or [Locker]; each option says which it
// applies to, and the other ignores it.
type Option func(*options)

type options struct {
	minValidity time.Duration
	prefix      string
	holdAtLeast time.Duration
	lockWait    time.Duration
}

// DefaultPrefix is the prefix of a [Locker]'s lock names: the lock of the
// job "report" is "gocron:report".
const DefaultPrefix = "gocron:"

// DefaultLockWait bounds how long a [Locker]'s Lock waits for the
// session to be live before gocron skips the run.
const DefaultLockWait = 5 * time.Second

func collect(opts []Option) options {
	o := options{prefix: DefaultPrefix, lockWait: DefaultLockWait}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// MinValidity makes a run start only if its term will stay valid for more
// than d (Elector and Locker): a job that needs a few seconds should not
// start in its term's last milliseconds. Default zero: any valid term.
func MinValidity(d time.Duration) Option { return func(o *options) { o.minValidity = d } }

// WithPrefix sets the prefix of the Locker's lock names (Locker only;
// default [DefaultPrefix]). The prefix and the job's name together must be
// a valid Simba lease name (deadline.ValidateName).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// HoldAtLeast keeps each run's lock for at least d after it was acquired,
// even when the run ends sooner (Locker only; ShedLock's lockAtLeastFor).
// Without it, a short job that ends before a scheduler whose clock is a
// little behind reaches the same tick lets that scheduler run the tick
// again. d should be shorter than the job's interval; a run of the same job
// on the same Locker within d reuses the term it still holds.
func HoldAtLeast(d time.Duration) Option { return func(o *options) { o.holdAtLeast = d } }

// LockWait bounds how long Lock waits for the session to be live (Locker
// only; default [DefaultLockWait]). A lock held elsewhere is refused at
// once, whatever the bound.
func LockWait(d time.Duration) Option { return func(o *options) { o.lockWait = d } }
