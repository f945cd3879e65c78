package memory

import (
	"time"

	"github.com/simba-go/simba/session/driver"
)

// Pause makes this client's calls block, before they take effect, until
// [Backend.Resume] or until their ctx is done: a backend that stopped
// answering.
func (b *Backend) Pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused == nil {
		b.paused = make(chan struct{})
	}
}

// Resume lets paused and later calls proceed.
func (b *Backend) Resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused != nil {
		close(b.paused)
		b.paused = nil
	}
}

// SetReplyDelay delays every reply of this client by d of real time, after
// the call took effect; a call whose ctx ends first returns ctx's error
// although it took effect. Zero turns the delay off.
func (b *Backend) SetReplyDelay(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delay = d
}

// DropReplies makes this client's next n calls take effect but return
// [ErrReplyLost], as when a reply is lost on the network.
func (b *Backend) DropReplies(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drop = n
}

// FailCalls makes this client's calls fail with err, wrapped, without
// taking effect, until FailCalls(nil).
func (b *Backend) FailCalls(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = err
}

// Expire ends a session now, as if its lease had run out, and broadcasts
// its leases; a lease won with a lock-delay keeps its name refused for the
// delay from now, and is broadcast when it has passed. It answers
// [driver.ErrExpired] from then on.
func (b *Backend) Expire(id driver.ID) {
	s := b.s
	s.mu.Lock()
	var freed []string
	if se, ok := s.sessions[id]; ok {
		freed = s.drop(id, se, s.cfg.clock.Now())
	}
	s.mu.Unlock()
	s.notify(freed)
}

// LoseData is a restart without persistence: every session and lease of
// the namespace is gone (their ids answer [driver.ErrExpired]), and
// subscribers get an empty [driver.Notice]. With keepTokens the per-name
// token counters survive, as in a store that keeps them durably; without,
// they restart and a new token epoch begins, so tokens keep rising (unless
// [WithoutTokenEpochs]). Session ids are never reused either way. The
// namespace's epoch record goes too, and the lock-delays under way: the next
// Acquire finds the record missing and starts a quarantine of one maximum
// lease plus one maximum lock-delay (see [Backend.Acquire]).
func (b *Backend) LoseData(keepTokens bool) {
	s := b.s
	s.mu.Lock()
	s.hasEpoch = false
	s.quarantineUntil = time.Time{}
	clear(s.sessions)
	clear(s.order)
	s.order = s.order[:0]
	clear(s.leases)
	clear(s.delayed) // the quarantine covers the lost delays
	if !keepTokens {
		s.counters = [tokenBuckets]uint64{}
		if !s.cfg.noEpochs {
			s.epoch++
		}
	}
	s.mu.Unlock()
	s.notify([]string{""})
}

// Owner reports who owns name now, by the backend's clock, without changing
// anything.
func (b *Backend) Owner(name string) (id driver.ID, token uint64, ok bool) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l, held := s.leases[name]
	if !held {
		return "", 0, false
	}
	if se, live := s.sessions[l.owner]; !live || !s.cfg.clock.Now().Before(se.expiresAt) {
		return "", 0, false
	}
	return l.owner, l.token, true
}

// Remaining reports the time session id has left by the backend's clock, as
// a renewal would report it, without renewing; false if it has ended.
func (b *Backend) Remaining(id driver.ID) (time.Duration, bool) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	se, ok := s.sessions[id]
	if !ok || !now.Before(se.expiresAt) {
		return 0, false
	}
	return s.remaining(se, now), true
}

// Stats returns the calls this client has received so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// NameRecords reports how many per-name records the namespace keeps now:
// one per lease held and one per name waiting out a lock-delay. A released
// name leaves none, and a delay's record goes at the first call after it
// has passed; the token high-water marks are a table of constant size.
// For tests that check that storage does not grow with the names ever used.
func (b *Backend) NameRecords() int {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases) + len(s.delayed)
}
