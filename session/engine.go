package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/term"
)

// The engine's rules, all run with s.mu held. Each backend reply is judged
// against the state it was sent in (the incarnation, the attempt), so a
// late, duplicated or reordered reply can never undo what a later one did.

// open asks the backend for a new session.
func (s *Session) open() {
	if s.state == Closed {
		return
	}
	s.setState(Opening)
	sentAt := s.env.Now()
	var reply driver.OpenReply
	var err error
	s.call(func(ctx context.Context) {
		reply, err = s.b.Open(ctx, driver.OpenRequest{LeaseDuration: s.cfg.LeaseDuration, Owner: s.owner})
	}, func(timedOut bool) {
		if s.state == Closed {
			if err == nil && !timedOut {
				s.closeLater(reply.ID)
			}
			return
		}
		failure := context.DeadlineExceeded
		if !timedOut {
			failure = err
			if err == nil {
				failure = s.opened(sentAt, reply)
			}
		}
		if failure != nil {
			s.openFails++
			backoff := s.cfg.MinBackoff << min(s.openFails-1, 16)
			backoff = min(backoff, s.cfg.RenewInterval)
			s.emit(Event{Kind: SessionSuspended, Err: failure})
			s.after(&s.openRetry, backoff, s.open) // Close stops it: it must not wait for it
		}
	}, func() {
		if err == nil {
			s.closeLater(reply.ID) // opened too late to use
		}
	})
}

// opened starts a new incarnation from a successful Open.
func (s *Session) opened(sentAt time.Time, r driver.OpenReply) error {
	if !s.cfg.GrantOK(r.Remaining) {
		s.closeLater(r.ID)
		return s.violation("Open granted %v for a lease of %v", r.Remaining, s.cfg.LeaseDuration)
	}
	life := newLifeline(s.env, s.cfg.Deadline(sentAt, r.Remaining))
	if life.Remaining() <= 0 {
		s.closeLater(r.ID)
		return errors.New("simba: backend granted a session already over by the local deadline (grant " + r.Remaining.String() + ")")
	}
	s.openFails = 0
	inc := &incarnation{id: r.ID, life: life, released: make(map[string]uint64)}
	if r.Nominal > 0 && r.Nominal <= s.cfg.LeaseDuration {
		inc.nominal = r.Nominal
	}
	s.inc = inc
	s.setState(Live)
	s.regrant(inc, r.Remaining)
	s.emit(Event{Kind: SessionOpened, Remaining: r.Remaining})
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	s.armRenew(inc, sentAt)
	s.armDeadline(inc)
	for _, c := range s.order {
		if c.want {
			c.queue()
		}
	}
	s.pumpAcquire()
	s.armCandidate()
	return nil
}

// regrant applies the renewal period a grant of remaining allows, and
// publishes SessionLeaseShortened once per backend session, unless the
// grant is what the backend's own rule gives (OpenReply.Nominal): a
// warning every session of such a backend raised would tell nothing.
func (s *Session) regrant(inc *incarnation, remaining time.Duration) {
	every, shortened := s.cfg.RenewEvery(remaining)
	s.renewEvery = every
	inc.margin = s.warn
	if slack := s.cfg.Validity(remaining) - every; inc.margin >= slack {
		// The warning would come before the next renewal is even due, and
		// so before every healthy renewal: New checked the margin against
		// LeaseDuration - RenewInterval, but a shorter grant (renewed
		// every third of it, SessionLeaseShortened) or the drift leaves
		// less. Warn instead halfway from the renewal's due time to the
		// deadline: a renewal that late is late, and the deadline is
		// still ahead.
		inc.margin = max(slack/2, 0)
	}
	if inc.nominal > 0 && remaining >= inc.nominal {
		shortened = false // structural: the backend's rule, not a clamp
	}
	if shortened && !inc.shortened {
		inc.shortened = true
		s.emit(Event{Kind: SessionLeaseShortened, Session: inc.id, Remaining: remaining, RenewEvery: every})
	}
}

func (s *Session) armRenew(inc *incarnation, from time.Time) {
	d := s.renewEvery - s.env.Now().Sub(from)
	s.after(&inc.renew, max(d, 0), func() { s.renew(inc) })
}

func (s *Session) armDeadline(inc *incarnation) {
	left := inc.life.Remaining()
	s.after(&inc.deadline, left, func() { s.checkDeadline(inc) })
	if s.warn > 0 {
		if left > inc.margin {
			inc.warned = false // the deadline moved away: warn again when it comes near
		}
		s.checkNear(inc)
	}
}

// checkNear publishes TermDeadlineNear for each of the incarnation's terms
// once its deadline is within the warning margin, or arms itself for when
// it will be (WithDeadlineWarning). Lock held.
func (s *Session) checkNear(inc *incarnation) {
	if inc.over || inc.warned {
		return
	}
	left := inc.life.Remaining()
	if left > inc.margin {
		s.after(&inc.near, left-inc.margin, func() { s.checkNear(inc) })
		return
	}
	if left <= 0 {
		return // the deadline check ends the terms
	}
	inc.warned = true
	at := inc.life.at()
	n, first := 0, ""
	for _, c := range s.order {
		if h := c.held; h != nil && h.inc == inc {
			if len(s.listeners) > 0 {
				// Not logged one by one: a session of 65,536 partitions
				// or lock runs would write as many WARN lines each time
				// a renewal is late. One line below counts them.
				s.publish(Event{Kind: TermDeadlineNear, Session: inc.id, Name: h.t.Name(), Token: h.t.Token(), Remaining: left, Deadline: at}, false)
			}
			if n == 0 {
				first = h.t.Name()
			}
			n++
		}
	}
	if n > 0 && s.log != nil && s.log.Enabled(context.Background(), slog.LevelWarn) {
		lg, id, state := s.log, inc.id, s.state
		s.deferFn(func() {
			lg.LogAttrs(context.Background(), slog.LevelWarn, "simba: "+TermDeadlineNear.String(),
				slog.String("session", string(id)), slog.String("state", state.String()),
				slog.Int("terms", n), slog.String("name", first), slog.Duration("remaining", left))
		})
	}
}

// renew sends one renewal for the incarnation.
func (s *Session) renew(inc *incarnation) {
	if inc.over || inc.renewing {
		return
	}
	inc.renewing, inc.recheck = true, false
	s.seq++
	sentSeq := s.seq
	sentAt := s.env.Now()
	req := driver.RenewRequest{ID: inc.id, KnownVersion: inc.version}
	var reply driver.RenewReply
	var err error
	s.call(func(ctx context.Context) {
		reply, err = s.b.Renew(ctx, req)
	}, func(timedOut bool) {
		inc.renewing = false
		if inc.over {
			return
		}
		switch {
		case timedOut:
			s.renewFailed(inc, context.DeadlineExceeded)
		case errors.Is(err, ErrExpired):
			s.expire(inc, term.SessionExpired)
		case err != nil:
			s.renewFailed(inc, err)
		case !s.cfg.GrantOK(reply.Remaining):
			s.renewFailed(inc, s.violation("Renew granted %v for a lease of %v", reply.Remaining, s.cfg.LeaseDuration))
		default:
			s.renewed(inc, sentAt, sentSeq, reply)
		}
		if inc.recheck {
			// Sent before the delete the notice told of: its reply may
			// still list the lease.
			s.renew(inc)
		}
	}, nil)
}

func (s *Session) renewed(inc *incarnation, sentAt time.Time, sentSeq uint64, r driver.RenewReply) {
	if !inc.life.extend(s.cfg.Deadline(sentAt, r.Remaining)) {
		// The deadline passed before this reply came: the session is over
		// and stays over. checkDeadline does the rest.
		s.checkDeadline(inc)
		return
	}
	s.setState(Live)
	s.regrant(inc, r.Remaining)
	s.emit(Event{Kind: SessionRenewed, Remaining: r.Remaining})
	s.armRenew(inc, sentAt)
	s.armDeadline(inc)
	switch {
	case r.Full:
		inc.owned = make(map[string]uint64, len(r.Leases))
		for _, l := range r.Leases {
			inc.owned[l.Name] = l.Token
		}
		inc.version = r.Version
	case r.Version != inc.version || inc.owned == nil:
		// The backend's set moved on without a list: ask for it next time.
		// The attempts queued while SUSPENDED leave now all the same.
		inc.version = 0
		s.pumpAcquire()
		return
	case inc.clean == (cleanMark{version: inc.version, heldGen: s.heldGen}):
		// The owned set is the one last seen in full and no term began or
		// ended since a check found it matched term for term: the check
		// would find nothing. Skipping it keeps a renewal's cost flat
		// with the number of leases.
		s.pumpAcquire()
		return
	}
	s.checkOwned(inc, sentSeq)
	s.pumpAcquire()
}

// checkOwned ends the terms whose lease the backend no longer lists, and
// releases leases the backend lists that no term holds (won by a reply
// that never arrived).
func (s *Session) checkOwned(inc *incarnation, sentSeq uint64) {
	terms, matched := 0, 0 // the incarnation's terms, and those the owned set lists
	for _, c := range s.order {
		h := c.held
		if h == nil || h.inc != inc {
			continue
		}
		terms++
		if inc.owned[c.name] == h.token {
			matched++
			continue
		}
		if h.confirmed >= sentSeq {
			continue // confirmed after the renewal left: the reply cannot know
		}
		c.setHeld(nil)
		s.revoke(c, h, term.TakenOver)
		c.h.Lost(h.t, term.TakenOver)
		if c.want {
			c.queue()
		}
	}
	if terms == matched && matched == len(inc.owned) {
		// Term for term: no lease without a term to release.
		inc.clean = cleanMark{version: inc.version, heldGen: s.heldGen}
		return
	}
	names := make([]string, 0, len(inc.owned))
	for name := range inc.owned {
		names = append(names, name)
	}
	slices.Sort(names)                // a deterministic order, for seeded simulations
	var pending map[driver.Lease]bool // the releases queued for inc, read once
	for _, name := range names {
		token := inc.owned[name]
		c := s.claims[name]
		if c != nil && (c.attempt != 0 || c.held != nil && c.held.inc == inc && c.held.token == token) {
			continue
		}
		if token <= inc.released[name] {
			if pending == nil {
				pending = s.pendingReleases(inc)
			}
			if pending[driver.Lease{Name: name, Token: token}] {
				continue
			}
		}
		s.release(inc, driver.Lease{Name: name, Token: token}, nil)
	}
}

// pendingReleases is the set of releases queued for inc. A set, not a
// scan per lease: a renewal that lands while a Leave of 65,536 partitions
// waits in the queue would otherwise scan it once per lease, seconds
// under the lock (issue 20, item 8).
func (s *Session) pendingReleases(inc *incarnation) map[driver.Lease]bool {
	out := make(map[driver.Lease]bool)
	for _, p := range s.releaseQ {
		if p.inc == inc {
			out[p.lease] = true
		}
	}
	return out
}

// releasePending reports whether the release of name under token is queued
// for inc. A scan: only a stale "already yours" reply asks, a rare path
// (pendingReleases is for the renewal that asks once per lease).
func (s *Session) releasePending(inc *incarnation, name string, token uint64) bool {
	for _, p := range s.releaseQ {
		if p.inc == inc && p.lease.Name == name && p.lease.Token == token {
			return true
		}
	}
	return false
}

// renewFailed suspends the session and schedules a retry with halving
// backoff, never past the deadline.
func (s *Session) renewFailed(inc *incarnation, err error) {
	left := inc.life.Remaining()
	if left <= 0 {
		s.checkDeadline(inc)
		return
	}
	if s.state != Suspended {
		s.setState(Suspended)
		s.emit(Event{Kind: SessionSuspended, Err: err})
	}
	if d := s.cfg.Backoff(left); d < left {
		s.after(&inc.renew, d, func() { s.renew(inc) })
	}
}

// checkDeadline ends the incarnation if its local deadline has passed.
func (s *Session) checkDeadline(inc *incarnation) {
	if inc.over {
		return
	}
	if left := inc.life.Remaining(); left > 0 {
		s.armDeadline(inc)
		return
	}
	s.expire(inc, term.DeadlinePassed)
}

// expire ends an incarnation: its terms end with reason, and a new backend
// session is opened. The old one is closed in the background when its
// deadline passed (it may still be alive on the backend, holding leases
// other nodes wait for), unless it asked for a lock-delay: its names must
// then wait out the delay after its expiry, which a Close would skip.
func (s *Session) expire(inc *incarnation, reason term.RevokeReason) {
	inc.over = true
	inc.life.end()
	s.stopTimer(&inc.renew)
	s.stopTimer(&inc.deadline)
	s.stopTimer(&inc.near)
	if s.inc == inc && s.state != Closed {
		// Events report the state after them: this backend session is
		// over and a new one is opened below (issue 12: deadline events
		// used to say LIVE or SUSPENDED).
		s.setState(Opening)
		// Its shortened period, if any, died with it: the calls from now
		// on (its own Close below, the next Opens) are bounded by the
		// configuration, not by that period, which only a grant used to
		// reset (issue 20, item 2: every Open given up after 82 ms).
		s.renewEvery = s.cfg.RenewInterval
	}
	if reason == term.SessionExpired {
		s.emit(Event{Kind: SessionExpired, Session: inc.id})
	} else {
		s.emit(Event{Kind: SessionDeadlinePassed, Session: inc.id})
		if !inc.delayed {
			s.closeLater(inc.id)
		}
		// else its terms ended without a release, their tasks perhaps
		// still at work: a Close would free their names at once, skipping
		// the lock-delay they asked for. The backend session expires by
		// itself within what is left of its lease, and the delay counts
		// from there (ADR 0275).
	}
	for _, c := range s.order {
		if c.attempt != 0 {
			c.attempt = 0
		}
		if h := c.held; h != nil && h.inc == inc {
			c.setHeld(nil)
			s.revoke(c, h, reason)
			c.h.Lost(h.t, reason)
		}
	}
	if s.inc == inc {
		s.inc = nil
		s.open()
	}
}

// closeLater closes a backend session that is no longer ours, best effort.
func (s *Session) closeLater(id ID) {
	if s.state != Closed {
		s.call(func(ctx context.Context) { _ = s.b.Close(ctx, id) }, func(bool) {}, nil)
		return
	}
	// Close cancels the root context (and stops the engine's timeouts), yet
	// a session granted during Close must still end now, not a lease
	// duration later: close it under its own bounded context.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.root), s.renewEvery)
	s.callIn(ctx, func(ctx context.Context) { _ = s.b.Close(ctx, id) }, func(bool) { cancel() }, nil)
}

// revoke ends a held term for reason and publishes it. Lock held.
func (s *Session) revoke(c *claim, h *held, reason term.RevokeReason) {
	if h.revoked {
		return
	}
	h.revoked = true
	h.revokeFn(reason)
	s.emit(Event{Kind: TermRevoked, Session: h.inc.id, Name: c.name, Token: h.token, Reason: reason, ClaimKind: c.kind(), Deadline: h.inc.life.at()})
}

// armCandidate keeps the candidate tick running while a claim wants a
// lease it does not hold: every RenewInterval/2 + jitter, all waiting
// claims attempt in one batch.
func (s *Session) armCandidate() {
	if s.state == Closed || s.candidate.stop != nil {
		return
	}
	waiting := false
	for _, c := range s.order {
		if c.want && c.held == nil {
			waiting = true
			break
		}
	}
	if !waiting {
		return
	}
	s.after(&s.candidate, s.cfg.RetryDelay(s.env.Jitter()), func() {
		s.stopTimer(&s.noticeT) // the tick answers the paced notices too
		s.answerNoticed()
		for _, c := range s.order {
			if c.want && c.held == nil && c.attempt == 0 {
				c.queue()
			}
		}
		s.pumpAcquire()
		s.armCandidate()
	})
}

// pumpAcquire sends one Acquire for every queued claim, unless one is in
// flight (its reply sends the next): batches form by themselves. One
// Acquire carries one lock-delay, the first queued claim's: a queued claim
// with another delay stays queued for the next call, whose delay is the
// first left behind after this call's in increasing order, round to the
// lowest (ADR 0240, 0275): the delays take turns.
func (s *Session) pumpAcquire() {
	inc := s.inc
	if s.acquiring || s.holdPump || inc == nil || inc.over || s.state != Live || !s.anyQueued {
		return
	}
	s.anyQueued = false // every queued claim is looked at below
	s.seq++
	attempt := s.seq
	s.lastAcquire = attempt
	var ac *acquireCall
	turn, delay := s.delayTurn, s.nextDelay
	s.delayTurn = false
	if turn {
		// The delay left behind goes first, if a claim still waits with it.
		turn = false
		for _, c := range s.order {
			if c.queued && c.want && c.held == nil && c.attempt == 0 && c.delay == delay {
				turn = true
				break
			}
		}
	}
	// The delays left behind: the next turn is the first of them after
	// this call's delay, in increasing order, round to the lowest, so
	// that with any number of delays each gets a call within as many
	// calls as there are delays waiting.
	var above, lowest time.Duration
	var anyAbove, anyLeft bool
	for _, c := range s.order {
		if !c.queued {
			continue
		}
		if c.want && c.held == nil && c.attempt == 0 {
			if ac == nil && (!turn || c.delay == delay) {
				ac = &acquireCall{inc: inc, attempt: attempt}
				ac.req.Names = ac.one[:0]
				ac.req.LockDelay = c.delay
			} else if ac == nil || c.delay != ac.req.LockDelay {
				// The next call, when this one returns. This call's delay
				// is the turn's when no call is made yet.
				s.anyQueued = true
				this := delay
				if ac != nil {
					this = ac.req.LockDelay
				}
				if c.delay > this && (!anyAbove || c.delay < above) {
					above, anyAbove = c.delay, true
				}
				if !anyLeft || c.delay < lowest {
					lowest, anyLeft = c.delay, true
				}
				continue
			}
			c.queued = false
			c.attempt = attempt
			ac.req.Names = append(ac.req.Names, c.name)
			continue
		}
		c.queued = false
	}
	if anyLeft {
		s.delayTurn, s.nextDelay = true, lowest
		if anyAbove {
			s.nextDelay = above
		}
	}
	if ac == nil {
		return
	}
	s.acquiring = true
	ac.req.ID = inc.id
	if ac.req.LockDelay > 0 {
		inc.delayed = true
	}
	names := ac.req.Names
	var runner chan *inflight // an attempt of one claim alone may run on its blocked caller
	if len(names) == 1 {
		if c := s.claims[names[0]]; c != nil {
			runner = c.runner
		}
	}
	s.startCall(&ac.inflight, s.root, ac)
	s.callAlone(len(names) == 1, runner, &ac.inflight)
}

// acquireCall is one Acquire in flight: request, reply and what to do with
// it, in the allocation of its inflight.
type acquireCall struct {
	inflight
	inc     *incarnation
	attempt uint64
	one     [1]string // req.Names of a single claim's attempt
	req     driver.AcquireRequest
	res     driver.AcquireReply
	err     error
}

func (a *acquireCall) op(ctx context.Context) { a.res, a.err = a.s.b.Acquire(ctx, a.req) }

func (a *acquireCall) reply(timedOut bool) {
	s, inc, attempt := a.s, a.inc, a.attempt
	s.acquiring = false
	failure := context.DeadlineExceeded
	if !timedOut {
		failure = a.err
	}
	delayRefused := errors.Is(failure, ErrLockDelay)
	for _, c := range s.order {
		if c.attempt == attempt && failure != nil {
			c.attempt = 0
			if delayRefused {
				// The backend refuses this delay to every attempt alike (it
				// is above its WithMaxLockDelay): the claim stops competing
				// rather than retry at every tick, and says why (ADR 0240).
				c.want = false
				c.queued = false
				s.emit(Event{Kind: LockDelayRefused, Session: inc.id, Name: c.name, ClaimKind: c.kind(), Remaining: c.delay, Err: failure})
			}
			if r, ok := c.h.(layer.Refusals); ok {
				r.Refused(failure)
			}
		}
	}
	switch {
	case errors.Is(failure, ErrExpired):
		if !inc.over {
			s.expire(inc, term.SessionExpired)
		}
	case failure != nil:
	default:
		s.acquired(inc, attempt, a.req.Names, a.res)
	}
	s.pumpAcquire()
	s.armCandidate()
}

func (a *acquireCall) late() {
	if a.err == nil {
		a.s.acquired(a.inc, a.attempt, a.req.Names, a.res) // no attempt is current: wins are released
	}
}

// acquired turns won leases into terms, under the three rules of
// "Becoming leader": the reply belongs to the current attempt, it arrived
// before the local deadline, and its token is higher than every token this
// session released for the name (and than every term this Session made
// for it, across backend sessions and takeovers). A win that cannot become
// a term is released.
//
// A reply that does not answer each name asked exactly once breaks the
// contract: a name it leaves out or answers twice is refused for this tick
// (a lease it may have granted is released, by token, or by the next
// renewal's owned list); a name nobody asked about is ignored, never
// released, since it may be a lease another claim's live term holds.
func (s *Session) acquired(inc *incarnation, attempt uint64, names []string, r driver.AcquireReply) {
	s.seq++
	confirmed := s.seq
	answers := make(map[string]int, len(names))
	for _, n := range names {
		answers[n] = 0
	}
	var bad []string
	for _, res := range r.Results {
		n, asked := answers[res.Name]
		if !asked {
			bad = append(bad, fmt.Sprintf("%q not asked for", res.Name))
			continue
		}
		answers[res.Name] = n + 1
	}
	for _, n := range names {
		switch answers[n] {
		case 0:
			bad = append(bad, fmt.Sprintf("%q not answered", n))
		case 1:
		default:
			bad = append(bad, fmt.Sprintf("%q answered %d times", n, answers[n]))
		}
	}
	var violation error
	if len(bad) > 0 {
		violation = s.violation("Acquire reply: %s", strings.Join(bad, ", "))
		for _, n := range names {
			if c := s.claims[n]; c != nil && c.attempt == attempt && answers[n] != 1 {
				c.attempt = 0
				if r, ok := c.h.(layer.Refusals); ok {
					r.Refused(violation)
				}
			}
		}
	}
	quarantined := s.quarantine(inc, r.Quarantine, r.QuarantineHint, attempt == s.lastAcquire)
	for _, res := range r.Results {
		n, asked := answers[res.Name]
		if !asked {
			continue
		}
		if quarantined != nil && res.Token != 0 {
			// A grant inside the quarantine the same reply announces makes
			// no sense: refused, and released by token, unless the token
			// is the one a live term of this session holds: releasing it
			// would free the lease under that term (the renewals settle
			// what the backend really holds).
			_ = s.violation("Acquire reply: %q granted (token %d) during a quarantine", res.Name, res.Token)
			c := s.claims[res.Name]
			mine := c.holds(inc, res.Token)
			if !inc.over && !mine {
				s.release(inc, driver.Lease{Name: res.Name, Token: res.Token}, nil)
			}
			res.Token = 0
		}
		if quarantined != nil && res.Err == nil {
			res.Err = quarantined
		}
		c := s.claims[res.Name]
		current := c != nil && c.attempt == attempt && n == 1
		if current {
			c.attempt = 0
		}
		if res.Token == 0 {
			if current {
				if r, ok := c.h.(layer.Refusals); ok {
					r.Refused(res.Err)
				}
			}
			continue
		}
		if c.holds(inc, res.Token) {
			continue // a duplicate of the reply that made this term
		}
		stale := !current || inc.over || inc != s.inc || res.Token <= inc.released[res.Name] || res.Token <= s.tokens[res.Name] || !c.want
		if stale || inc.life.Remaining() <= 0 {
			switch {
			case inc.over:
			case res.Token > inc.released[res.Name]:
				s.release(inc, driver.Lease{Name: res.Name, Token: res.Token}, nil)
			case !s.releasePending(inc, res.Name, res.Token):
				// "Already yours" under a token this session released: that
				// release did not take (a lost call), and no term may reuse
				// the token. Released again, or the name stays stuck until
				// a renewal's owned list notices.
				s.release(inc, driver.Lease{Name: res.Name, Token: res.Token}, nil)
			}
			if current {
				// The attempt is answered all the same (issue 20, item 3: a
				// TryAcquire waited for candidate ticks): not won, the
				// lease being held, by an earlier lease of this session
				// that is being released; or won too late to use.
				var why error
				if inc.life.Remaining() <= 0 && !stale {
					why = fmt.Errorf("simba: %q granted after the session's local deadline passed", res.Name)
				}
				if r, ok := c.h.(layer.Refusals); ok {
					r.Refused(why)
				}
			}
			continue
		}
		s.tokens[res.Name] = res.Token
		elected := Event{Kind: TermElected, Session: inc.id, Name: res.Name, Token: res.Token, ClaimKind: c.kind()}
		t, revokeFn := term.New(s.termParent(c, elected), res.Name, res.Token, inc.life)
		c.setHeld(&held{t: t, revokeFn: revokeFn, token: res.Token, inc: inc, confirmed: confirmed})
		s.emit(elected)
		if s.warn > 0 && inc.warned {
			// Won with the deadline already within the margin: the
			// warning is per term, and checkNear has published it.
			if left := inc.life.Remaining(); left > 0 && left <= inc.margin {
				s.emit(Event{Kind: TermDeadlineNear, Session: inc.id, Name: res.Name, Token: res.Token, Remaining: left, Deadline: inc.life.at()})
			}
		}
		c.h.Won(t)
	}
}

// release gives a lease back to the backend, carrying its token; done, if
// not nil, runs with the lock held once the backend answered or the call
// failed. Lock held.
func (s *Session) release(inc *incarnation, l driver.Lease, done layer.Runner) {
	if l.Token > inc.released[l.Name] {
		inc.released[l.Name] = l.Token
	}
	s.releaseQueued(l.Name)
	s.releaseQ = append(s.releaseQ, pendingRelease{inc: inc, lease: l, done: done})
	s.pumpRelease()
}

func (s *Session) pumpRelease() {
	if s.releasing || len(s.releaseQ) == 0 {
		return
	}
	// One call per backend session; the rest follow when it returns. The
	// rest stay in releaseQ's array, filtered in place.
	batch := s.releaseQ
	inc := batch[0].inc
	rc := &releaseCall{}
	rc.req = driver.ReleaseRequest{ID: inc.id, Leases: rc.one[:0]}
	rc.dones = rc.oneDone[:0]
	rest := batch[:0]
	for _, p := range batch {
		if p.inc != inc {
			rest = append(rest, p)
			continue
		}
		rc.req.Leases = append(rc.req.Leases, p.lease)
		if p.done != nil {
			rc.dones = append(rc.dones, p.done)
		}
	}
	clear(batch[len(rest):])
	s.releaseQ = rest
	s.releasing = true
	s.startCall(&rc.inflight, s.root, rc)
	s.callAlone(len(rc.req.Leases) == 1, nil, &rc.inflight)
}

// releaseCall is one Release in flight, in the allocation of its inflight.
type releaseCall struct {
	inflight
	one     [1]driver.Lease // req.Leases of a single lease's release
	oneDone [1]layer.Runner
	req     driver.ReleaseRequest
	dones   []layer.Runner
}

func (r *releaseCall) op(ctx context.Context) {
	_ = r.s.b.Release(ctx, r.req) // a failed release is healed by the next renewal's owned list
}

func (r *releaseCall) reply(timedOut bool) {
	s := r.s
	s.releasing = false
	if !timedOut { // else op may still reach the backend: late counts it
		r.settled()
	}
	s.runDones(r.dones)
	s.pumpRelease()
}

// doneChunk is how many release callbacks run in one hold of the lock.
const doneChunk = 1024

// runDones runs a release's done callbacks with the lock held: at most
// doneChunk now, the rest in later steps of the delivery loop, each under
// the lock again (and before anything Close waits for is delivered), so
// that the release of a large group's 65,536 partitions never holds the
// lock for long (issue 20, item 8). Lock held.
func (s *Session) runDones(dones []layer.Runner) {
	n := min(len(dones), doneChunk)
	for _, d := range dones[:n] {
		d.Run()
	}
	if rest := dones[n:]; len(rest) > 0 {
		s.deferFn(func() {
			s.mu.Lock()
			s.runDones(rest)
			s.mu.Unlock()
		})
	}
}

func (r *releaseCall) late() { r.settled() }

// settled counts the call's releases done, so that their names' token
// entries may be forgotten once retired (ADR 0295). Lock held.
func (r *releaseCall) settled() {
	for _, l := range r.req.Leases {
		r.s.releaseDone(l.Name)
	}
}

// notice answers a release notice from the backend with an attempt.
func (s *Session) notice(n Notice) {
	s.tellWatchers(n)
	s.mu.Lock()
	if s.state == Closed {
		s.mu.Unlock()
		return
	}
	if n.Name == "" {
		for _, c := range s.order {
			if c.want && c.held == nil {
				c.queue()
			}
		}
	} else if c := s.claims[n.Name]; c != nil && c.held != nil {
		// A notice for a name this session holds: its lease was deleted
		// by someone else (an operator's `etcdctl lease revoke` or `del`,
		// a DEL on Redis) while the term still runs on this process's
		// clock. Renew at once instead of at the next tick: the reply ends
		// the term (the lease is no longer listed, or the session is
		// gone), a round trip after the candidates hear of it rather than
		// up to a renewal interval later (docs/adr/0228).
		if c.held.inc.renewing {
			c.held.inc.recheck = true
		}
		s.renew(c.held.inc)
	} else if c != nil && c.want && c.held == nil {
		if c.paced {
			s.pacedNotice(c)
		} else {
			c.queue()
		}
	}
	s.pumpAcquire()
	s.mu.Unlock()
	s.drain()
}

// pacedNotice answers a paced claim's notice at once if no paced notice
// was answered in the last RetryDelay(0) (the shortest candidate tick),
// and otherwise at the end of that window, with every paced notice that
// arrived in it, in one Acquire: a stream of notices (a rebalance's
// releases, each when its old owner's task returns) costs one call per
// window instead of one per notice, and a lone notice waits for nothing.
// A candidate tick answers the waiting ones too. Lock held.
func (s *Session) pacedNotice(c *claim) {
	now := s.env.Now()
	if !now.Before(s.noticeUntil) {
		s.noticeUntil = now.Add(s.cfg.RetryDelay(0))
		c.queue()
		return
	}
	if !c.noticed {
		c.noticed = true
		s.noticed = append(s.noticed, c)
	}
	if s.noticeT.stop == nil {
		s.after(&s.noticeT, s.noticeUntil.Sub(now), func() {
			s.noticeUntil = s.env.Now().Add(s.cfg.RetryDelay(0))
			s.answerNoticed()
			s.pumpAcquire()
		})
	}
}

// answerNoticed queues the claims whose paced notice waits. Lock held.
func (s *Session) answerNoticed() {
	for _, c := range s.noticed {
		c.noticed = false
		if c.want && c.held == nil && !c.dropped {
			c.queue()
		}
	}
	s.noticed = nil
}

// quarantine notes the quarantine an Acquire reply announced and returns
// the error refused names carry, or nil when the reply announced none. The
// event is published when a quarantine begins, not for every refused tick.
// Only the reply of the latest Acquire sent (latest) moves that state: a
// late reply of an abandoned one is old news, which must neither end the
// quarantine current replies announce nor start one. A quarantine never
// lengthens a term: it only refuses grants.
func (s *Session) quarantine(inc *incarnation, d time.Duration, hint string, latest bool) error {
	if d <= 0 {
		if latest {
			s.quarantined = false
		}
		return nil
	}
	err := fmt.Errorf("%w: no lease for %v more", ErrQuarantined, d)
	if hint != "" {
		err = fmt.Errorf("%w: %s", err, hint)
	}
	if latest && !s.quarantined {
		s.quarantined = true
		s.emit(Event{Kind: BackendQuarantined, Session: inc.id, Remaining: d, Err: err})
	}
	return err
}

// violation publishes a backend reply that broke the contract and returns
// the error to treat it as a failed call with. Lock held.
func (s *Session) violation(format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{ErrContractViolation}, args...)...)
	s.emit(Event{Kind: BackendContractViolation, Err: err})
	return err
}
