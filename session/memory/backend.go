package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// Errors of the memory backend, for errors.Is.
var (
	// ErrReplyLost is returned by a call whose reply [Backend.DropReplies]
	// dropped: the call took effect, the caller just never heard.
	ErrReplyLost = errors.New("memory: reply lost")
	// ErrDuplicateID is returned by Open when the id source of
	// [WithIDSource] repeats an id: a session id is never reused.
	ErrDuplicateID = errors.New("memory: duplicate session id")
	// ErrInvalidLease is returned by Open for a lease duration that is not
	// positive.
	ErrInvalidLease = errors.New("memory: invalid lease duration")
)

// Backend is one client of an in-memory namespace: a [driver.Backend] and
// [driver.Broadcaster] for tests, never for production. Its methods are safe
// for concurrent use.
type Backend struct {
	s *store

	mu     sync.Mutex
	paused chan struct{} // closed by Resume; nil when not paused
	delay  time.Duration
	drop   int
	fail   error
	stats  Stats
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Broadcaster = (*Backend)(nil)
)

// Stats counts the calls a client received, whether or not a fault made
// them fail, so a test can assert, say, one Renew per renewal period.
type Stats struct {
	Open, Renew, Acquire, Release, Close, Inspect int
}

// New returns a client of a new, empty namespace. It fails, wrapping
// [ErrInvalidOption], if an option is invalid.
func New(opts ...Option) (*Backend, error) {
	cfg := config{clock: deadline.System{}, newID: randomID, grantNum: 1, grantDn: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.maxLease == 0 {
		cfg.maxLease = DefaultMaxLease
	}
	return &Backend{s: newStore(cfg)}, nil
}

// NewClient returns another client of b's namespace: it sees the same
// sessions, leases and clock, and its releases reach the same subscribers,
// but it has its own faults and [Stats], as another node would.
func (b *Backend) NewClient() *Backend {
	return &Backend{s: b.s}
}

// Open opens a session with the requested lease, capped by [WithMaxLease].
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if err := b.enter(ctx, func(s *Stats) { s.Open++ }); err != nil {
		return driver.OpenReply{}, fmt.Errorf("memory: open: %w", err)
	}
	if req.LeaseDuration <= 0 {
		return driver.OpenReply{}, errorf(ErrInvalidLease, "open: lease %v must be positive", req.LeaseDuration)
	}
	if err := req.Owner.Check(); err != nil {
		return driver.OpenReply{}, fmt.Errorf("memory: open: %w", err)
	}
	reply, freed, err := b.s.open(req.LeaseDuration, req.Owner)
	b.s.notify(freed)
	if err != nil {
		return driver.OpenReply{}, err
	}
	if err := b.exit(ctx); err != nil {
		return driver.OpenReply{}, fmt.Errorf("memory: open: %w", err)
	}
	return reply, nil
}

// Inspect lists who holds the selected leases (see [driver.Inspector]).
// Invalid names or prefix fail with an error wrapping
// [deadline.ErrInvalidName].
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	for _, n := range req.Names {
		if err := deadline.ValidateName(n); err != nil {
			return nil, fmt.Errorf("memory: inspect: %w", err)
		}
	}
	if req.Prefix != "" && len(req.Names) == 0 {
		if err := deadline.ValidateName(req.Prefix); err != nil {
			return nil, fmt.Errorf("memory: inspect prefix: %w", err)
		}
	}
	if err := b.enter(ctx, func(s *Stats) { s.Inspect++ }); err != nil {
		return nil, fmt.Errorf("memory: inspect: %w", err)
	}
	out, freed := b.s.inspect(req)
	b.s.notify(freed)
	if err := b.exit(ctx); err != nil {
		return nil, fmt.Errorf("memory: inspect: %w", err)
	}
	return out, nil
}

var _ driver.Inspector = (*Backend)(nil)

// Renew extends the session by its granted lease and reports its leases;
// the list only when req.KnownVersion is not the current version.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if err := b.enter(ctx, func(s *Stats) { s.Renew++ }); err != nil {
		return driver.RenewReply{}, fmt.Errorf("memory: renew: %w", err)
	}
	reply, freed, err := b.s.renew(req)
	b.s.notify(freed)
	if err != nil {
		return driver.RenewReply{}, err
	}
	if err := b.exit(ctx); err != nil {
		return driver.RenewReply{}, fmt.Errorf("memory: renew: %w", err)
	}
	return reply, nil
}

// Acquire tries each name for the session. After a data loss
// ([Backend.LoseData]), or on a namespace made with
// [WithUninitialisedNamespace] that [Backend.Init] did not initialise, the
// first Acquire starts a quarantine of one maximum lease ([WithMaxLease])
// plus one maximum lock-delay ([WithMaxLockDelay]) on the backend's clock:
// until it ends every Acquire grants nothing and answers
// [driver.AcquireReply.Quarantine] = the time left.
//
// A term won with a positive req.LockDelay that ends by expiry (the
// session's lease ran out, or [Backend.Expire]) leaves its name refused,
// as held, for the delay after the session's end on the backend's clock;
// a Release or a Close frees it at once. A LockDelay that is negative or
// above [WithMaxLockDelay] fails the whole request with an error wrapping
// [driver.ErrLockDelay].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if err := b.enter(ctx, func(s *Stats) { s.Acquire++ }); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("memory: acquire: %w", err)
	}
	reply, freed, err := b.s.acquire(req)
	b.s.notify(freed)
	if err != nil {
		return driver.AcquireReply{}, err
	}
	if err := b.exit(ctx); err != nil {
		return driver.AcquireReply{}, fmt.Errorf("memory: acquire: %w", err)
	}
	return reply, nil
}

// Init creates the namespace's epoch record if it is missing, so that the
// first Acquire on a namespace made with [WithUninitialisedNamespace] is not
// quarantined: the explicit initialisation step the Redis and ZooKeeper
// backends have (ADR 0130). Called on a namespace that lost its data before
// any Acquire noticed, it cancels that quarantine: call it only on a new
// namespace. It applies the client's faults like any call.
func (b *Backend) Init(ctx context.Context) error {
	if err := b.enter(ctx, func(*Stats) {}); err != nil {
		return fmt.Errorf("memory: init: %w", err)
	}
	b.s.init()
	if err := b.exit(ctx); err != nil {
		return fmt.Errorf("memory: init: %w", err)
	}
	return nil
}

// Release deletes the leases the session owns under the given tokens and
// broadcasts each deleted name. A mismatched lease is left alone. A request
// with an invalid name fails, wrapping [deadline.ErrInvalidName], and
// releases nothing.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if err := b.enter(ctx, func(s *Stats) { s.Release++ }); err != nil {
		return fmt.Errorf("memory: release: %w", err)
	}
	freed, err := b.s.release(req)
	b.s.notify(freed)
	if err != nil {
		return err
	}
	if err := b.exit(ctx); err != nil {
		return fmt.Errorf("memory: release: %w", err)
	}
	return nil
}

// Close ends the session and releases its leases, broadcasting each. An
// expired or unknown session is not an error. Later calls for the session
// answer [driver.ErrExpired].
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	if err := b.enter(ctx, func(s *Stats) { s.Close++ }); err != nil {
		return fmt.Errorf("memory: close: %w", err)
	}
	b.s.notify(b.s.close(id))
	if err := b.exit(ctx); err != nil {
		return fmt.Errorf("memory: close: %w", err)
	}
	return nil
}

// enter counts a call and applies the faults that act before it takes
// effect: a cancelled ctx, a pause, failing calls.
func (b *Backend) enter(ctx context.Context, count func(*Stats)) error {
	b.mu.Lock()
	count(&b.stats)
	paused, fail := b.paused, b.fail
	b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if paused != nil {
		select {
		case <-paused:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
		fail = b.fail // FailCalls may have changed while paused
		b.mu.Unlock()
	}
	return fail
}

// exit applies the faults that act after a call took effect: a lost reply,
// a slow reply.
func (b *Backend) exit(ctx context.Context) error {
	b.mu.Lock()
	delay := b.delay
	lost := b.drop > 0
	if lost {
		b.drop--
	}
	b.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if lost {
		return ErrReplyLost
	}
	return nil
}

// errorf wraps sentinel with a message.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("memory: "+format+": %w", append(args, sentinel)...)
}
