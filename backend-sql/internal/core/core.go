// Package core is the part of the SQL backends that does not depend on the
// SQL dialect: session ids, validation of names and ids, the shape of every
// call, and the expansion of the validated table prefix into SQL text.
// Each dialect supplies a [Store] whose methods are one statement each.
package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// Expand replaces every "{p}" in text with prefix after validating it. It is
// the only place where text that did not come from this module reaches SQL.
func Expand(text, prefix string) (string, error) {
	if err := sqlbackend.ValidatePrefix(prefix); err != nil {
		return "", err
	}
	return strings.ReplaceAll(text, "{p}", prefix), nil
}

// NewID returns a new session id: 128 random bits from crypto/rand, in
// lower-case hex.
func NewID() (driver.ID, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	return driver.ID(hex.EncodeToString(b[:])), nil
}

// wellFormed reports whether id could have come from [NewID]. Others are
// unknown to the backend, which the SPI treats as expired.
func wellFormed(id driver.ID) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// RenewResult is what a [Store] answers to a renewal of a live session.
type RenewResult struct {
	RemainingUS int64
	Version     uint64
	// Leases is the owned set, listed only when Version differs from the
	// version asked about.
	Leases []driver.Lease
}

// AcquireResult is what a [Store] answers to an acquisition by a live
// session: one token per name (0 where not acquired), or, when QuarantineUS
// is positive, no token at all (Tokens is nil) and the time left in the
// namespace's quarantine by the database clock (ADR 0130).
type AcquireResult struct {
	Tokens       []uint64
	QuarantineUS int64
}

// Store is one SQL dialect. Each method is one call to a stored routine,
// that is one statement and one round trip; ok is false when the session
// has expired or is unknown. waitMS bounds every lock wait of the call in
// the database (lock_timeout, innodb_lock_wait_timeout), so a call the
// client gave up on does not commit much later (see [Backend.lockWait]).
type Store interface {
	// Open stores the session with its owner encoded by [EncodeOwner] ("":
	// none).
	Open(ctx context.Context, id string, leaseUS int64, owner string, waitMS int64) (remainingUS int64, err error)
	Renew(ctx context.Context, id string, known uint64, waitMS int64) (r RenewResult, ok bool, err error)
	// Acquire gets names sorted and without duplicates (so that concurrent
	// calls lock lease rows in one order). It grants nothing while the
	// namespace's epoch row says it is quarantined, and when the row is
	// missing (the tables were emptied) recreates it with a quarantine of
	// quarantineUS from the database's now, in the same transaction that
	// would have granted. delayUS (≥ 0, at most the backend's maximum) is
	// the lock-delay recorded with each grant (driver.AcquireRequest.LockDelay).
	Acquire(ctx context.Context, id string, names []string, quarantineUS, waitMS, delayUS int64) (r AcquireResult, ok bool, err error)
	// Release gets leases sorted by name.
	Release(ctx context.Context, id string, leases []driver.Lease, waitMS int64) error
	Close(ctx context.Context, id string, waitMS int64) error
	// Inspect lists the held leases whose session is alive: those named in
	// names (sorted, no duplicates), or when names is nil those starting
	// with prefix ("" for all). It takes prefix literally.
	Inspect(ctx context.Context, names []string, prefix string) ([]HolderRow, error)
}

// HolderRow is a live holder as a [Store] reads it.
type HolderRow struct {
	Name        string
	Token       int64
	Session     string
	Owner       string // as [EncodeOwner] made it; "" for none
	RemainingUS int64
}

// Backend implements [driver.Backend] over a [Store].
type Backend struct {
	Store Store
	// Label starts every error message, e.g. "pgsimba".
	Label string
	// Retryable reports errors after which the database rolled the call's
	// transaction back and it may simply run again: a deadlock victim.
	// Optional.
	Retryable func(error) bool
	// Ready, if not nil, runs before the first call (and again before each
	// call until it has succeeded once): the lazy preparation and schema
	// check of a backend built without touching the database.
	Ready func(ctx context.Context) error
	// MaxLease caps every session's lease ([DefaultMaxLease] if zero), and
	// is the length of the quarantine after a data loss: a term granted
	// before the loss cannot outlive it (ADR 0130).
	MaxLease time.Duration
	// MaxLockDelay is the longest lock-delay an Acquire may ask for
	// (WithMaxLockDelay; 0 refuses every positive delay). The quarantine
	// after a data loss lasts MaxLease + MaxLockDelay (ADR 0251): the
	// delays are lost with the leases.
	MaxLockDelay time.Duration

	shut    atomic.Bool
	readyMu sync.Mutex
	readyOK atomic.Bool
}

// DefaultMaxLease is the cap on leases, and the quarantine after a data
// loss, when WithMaxLease is not given (ADR 0130).
const DefaultMaxLease = 30 * time.Second

// CheckMaxLease validates a WithMaxLease value.
func CheckMaxLease(label string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s: WithMaxLease(%v): want at least 1ms", label, d)
	}
	return nil
}

// CheckMaxLockDelay validates a WithMaxLockDelay value.
func CheckMaxLockDelay(label string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s: WithMaxLockDelay(%v): want 0 or more", label, d)
	}
	return nil
}

// quarantine is the quarantine after a data loss: one maximum lease, so
// that no term granted before the loss is still believed in, plus one
// maximum lock-delay, so that no name whose delay was lost with it is
// granted before that delay would have ended (ADR 0251).
func (b *Backend) quarantine() time.Duration { return b.maxLease() + max(0, b.MaxLockDelay) }

// QuarantineUS is [Backend]'s quarantine after a data loss in µs, for the
// routines that note a loss outside Acquire (MariaDB's open and renew).
func (b *Backend) QuarantineUS() int64 { return b.quarantine().Microseconds() }

func (b *Backend) maxLease() time.Duration {
	if b.MaxLease <= 0 {
		return DefaultMaxLease
	}
	return b.MaxLease
}

// lockWait is the bound, in milliseconds, on each lock wait of a call in
// the database: the time left until ctx's deadline (the engine gives every
// call one renewal period), or MaxLease when ctx has none; at least 1 ms
// (0 would mean "no bound" to PostgreSQL). A call the client has given up
// on then fails in the database soon after instead of committing much
// later, when its reply no longer reaches anyone.
func (b *Backend) lockWait(ctx context.Context) int64 {
	d := b.maxLease()
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return max(1, d.Milliseconds())
}

// maxAttempts bounds the runs of one call that keeps losing deadlocks or
// serialization failures (a pool whose default isolation is repeatable
// read or serializable, ADR 0171); retryPause is the first pause between
// runs, doubled after each, jittered so that the losers of one conflict do
// not meet again.
const (
	maxAttempts = 10
	retryPause  = time.Millisecond
)

// retry runs f until it succeeds, fails for good, has run maxAttempts
// times, or ctx ends. Every routine runs in one transaction, so a
// deadlock victim or a serialization failure left nothing behind and is
// safe to run again.
func (b *Backend) retry(ctx context.Context, f func() error) error {
	pause := retryPause
	for i := 1; ; i++ {
		err := f()
		if err == nil || i == maxAttempts || b.Retryable == nil || !b.Retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(pause/2 + mrand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Shut makes every later call fail with [driver.ErrClosed].
func (b *Backend) Shut() { b.shut.Store(true) }

// closed reports the error for a call after Shut, or nil; before the
// first call it runs Ready.
func (b *Backend) closed(ctx context.Context, op string) error {
	if b.shut.Load() {
		return fmt.Errorf("%s: %s: backend shut down: %w", b.Label, op, driver.ErrClosed)
	}
	if b.Ready == nil || b.readyOK.Load() {
		return nil
	}
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	if b.readyOK.Load() {
		return nil
	}
	if err := b.Ready(ctx); err != nil {
		return b.wrap(op, err)
	}
	b.readyOK.Store(true)
	return nil
}

func (b *Backend) wrap(op string, err error) error {
	return fmt.Errorf("%s: %s: %w", b.Label, op, err)
}

func (b *Backend) expired(op string, id driver.ID) error {
	return fmt.Errorf("%s: %s: session %s: %w", b.Label, op, id, driver.ErrExpired)
}

// Open implements [driver.Backend].
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if err := b.closed(ctx, "open"); err != nil {
		return driver.OpenReply{}, err
	}
	if req.LeaseDuration < time.Millisecond {
		return driver.OpenReply{}, b.wrap("open", fmt.Errorf("lease duration %v is shorter than 1ms", req.LeaseDuration))
	}
	// Every grant is capped, so that one MaxLease of quarantine after a
	// data loss outlasts every term granted before it (ADR 0130).
	lease := min(req.LeaseDuration, b.maxLease())
	owner, err := EncodeOwner(req.Owner)
	if err != nil {
		return driver.OpenReply{}, b.wrap("open", err)
	}
	id, err := NewID()
	if err != nil {
		return driver.OpenReply{}, b.wrap("open", err)
	}
	var rem int64
	err = b.retry(ctx, func() (err error) {
		rem, err = b.Store.Open(ctx, string(id), lease.Microseconds(), owner, b.lockWait(ctx))
		return err
	})
	if err != nil {
		return driver.OpenReply{}, b.wrap("open", err)
	}
	return driver.OpenReply{ID: id, Remaining: time.Duration(rem) * time.Microsecond}, nil
}

// Renew implements [driver.Backend].
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if err := b.closed(ctx, "renew"); err != nil {
		return driver.RenewReply{}, err
	}
	if !wellFormed(req.ID) {
		return driver.RenewReply{}, b.expired("renew", req.ID)
	}
	var r RenewResult
	var ok bool
	err := b.retry(ctx, func() (err error) {
		r, ok, err = b.Store.Renew(ctx, string(req.ID), req.KnownVersion, b.lockWait(ctx))
		return err
	})
	if err != nil {
		return driver.RenewReply{}, b.wrap("renew", err)
	}
	if !ok {
		return driver.RenewReply{}, b.expired("renew", req.ID)
	}
	rep := driver.RenewReply{
		Remaining: time.Duration(r.RemainingUS) * time.Microsecond,
		Version:   r.Version,
		Full:      r.Version != req.KnownVersion,
	}
	if rep.Full {
		rep.Leases = r.Leases
		if rep.Leases == nil {
			rep.Leases = []driver.Lease{}
		}
	}
	return rep, nil
}

// Acquire implements [driver.Backend].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if err := b.closed(ctx, "acquire"); err != nil {
		return driver.AcquireReply{}, err
	}
	if req.LockDelay < 0 || req.LockDelay > max(0, b.MaxLockDelay) {
		return driver.AcquireReply{}, b.wrap("acquire", fmt.Errorf("%w: lock-delay %v: want 0 to %v, the backend's WithMaxLockDelay", driver.ErrLockDelay, req.LockDelay, max(0, b.MaxLockDelay)))
	}
	if !wellFormed(req.ID) {
		return driver.AcquireReply{}, b.expired("acquire", req.ID)
	}
	rep := driver.AcquireReply{Results: make([]driver.AcquireResult, len(req.Names))}
	var names []string
	for i, n := range req.Names {
		rep.Results[i].Name = n
		if err := deadline.ValidateName(n); err != nil {
			rep.Results[i].Err = err
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return rep, nil
	}
	var res AcquireResult
	var ok bool
	err := b.retry(ctx, func() (err error) {
		res, ok, err = b.Store.Acquire(ctx, string(req.ID), names, b.quarantine().Microseconds(), b.lockWait(ctx), (req.LockDelay + time.Microsecond - 1).Microseconds())
		return err
	})
	if err != nil {
		return driver.AcquireReply{}, b.wrap("acquire", err)
	}
	if !ok {
		return driver.AcquireReply{}, b.expired("acquire", req.ID)
	}
	if res.QuarantineUS > 0 {
		// Nothing granted: every valid name answers token 0. Reported as
		// the database measured it; a quarantine only refuses grants, it
		// never lengthens a term.
		rep.Quarantine = time.Duration(res.QuarantineUS) * time.Microsecond
		return rep, nil
	}
	tokens := res.Tokens
	if len(tokens) != len(names) {
		return driver.AcquireReply{}, b.wrap("acquire", fmt.Errorf("%d tokens for %d names", len(tokens), len(names)))
	}
	for i := range rep.Results {
		if rep.Results[i].Err != nil {
			continue
		}
		j, _ := slices.BinarySearch(names, rep.Results[i].Name)
		rep.Results[i].Token = tokens[j]
	}
	return rep, nil
}

// Release implements [driver.Backend].
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if err := b.closed(ctx, "release"); err != nil {
		return err
	}
	if len(req.Leases) == 0 || !wellFormed(req.ID) {
		return nil // nothing this backend could own
	}
	leases := slices.Clone(req.Leases)
	for _, l := range leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return b.wrap("release", err)
		}
	}
	slices.SortFunc(leases, func(x, y driver.Lease) int {
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return compareUint(x.Token, y.Token)
	})
	leases = slices.Compact(leases)
	if err := b.retry(ctx, func() error { return b.Store.Release(ctx, string(req.ID), leases, b.lockWait(ctx)) }); err != nil {
		return b.wrap("release", err)
	}
	return nil
}

// Close implements [driver.Backend].
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	if err := b.closed(ctx, "close"); err != nil {
		return err
	}
	if !wellFormed(id) {
		return nil // unknown: closing it is not an error
	}
	if err := b.retry(ctx, func() error { return b.Store.Close(ctx, string(id), b.lockWait(ctx)) }); err != nil {
		return b.wrap("close", err)
	}
	return nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ErrBadReply is wrapped when a stored routine answers something this code
// does not expect, for example after someone changed the schema by hand.
var ErrBadReply = errors.New("unexpected reply from the database")

// EncodeOwner checks an owner and encodes it for the sessions table; the
// zero Owner (a direct caller that says nothing) as "".
func EncodeOwner(o driver.Owner) (string, error) {
	if err := o.Check(); err != nil || o.Identity == "" {
		return "", err
	}
	js, err := json.Marshal(o)
	return string(js), err
}

// Inspect implements [driver.Inspector].
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	if err := b.closed(ctx, "inspect"); err != nil {
		return nil, err
	}
	var names []string
	for _, n := range req.Names {
		if err := deadline.ValidateName(n); err != nil {
			return nil, b.wrap("inspect", err)
		}
		names = append(names, n)
	}
	if len(names) == 0 && req.Prefix != "" {
		if err := deadline.ValidateName(req.Prefix); err != nil {
			return nil, b.wrap("inspect prefix", err)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var rows []HolderRow
	err := b.retry(ctx, func() (err error) {
		rows, err = b.Store.Inspect(ctx, names, req.Prefix)
		return err
	})
	if err != nil {
		return nil, b.wrap("inspect", err)
	}
	out := make([]driver.Holder, 0, len(rows))
	for _, r := range rows {
		if r.Token <= 0 || !wellFormed(driver.ID(r.Session)) {
			return nil, b.wrap("inspect", fmt.Errorf("%w: holder of %q: token %d, session %q", ErrBadReply, r.Name, r.Token, r.Session))
		}
		h := driver.Holder{
			Name: r.Name, Token: uint64(r.Token), Session: driver.ID(r.Session),
			Remaining: time.Duration(r.RemainingUS) * time.Microsecond,
		}
		if r.Owner != "" {
			if err := json.Unmarshal([]byte(r.Owner), &h.Owner); err != nil {
				return nil, b.wrap("inspect", fmt.Errorf("%w: owner of session %s: %w", ErrBadReply, r.Session, err))
			}
		}
		out = append(out, h)
	}
	// Sorted here, by bytes: the database's collation may order otherwise.
	slices.SortFunc(out, func(x, y driver.Holder) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}
