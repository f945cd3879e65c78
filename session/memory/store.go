package memory

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// epochShift places the epoch above the per-name counter in a token.
const epochShift = 40

// store is one namespace's data, shared by every client of it.
type store struct {
	cfg config

	mu       sync.Mutex
	issued   map[driver.ID]struct{} // every id ever handed out; survives LoseData
	sessions map[driver.ID]*sess    // live sessions (an unknown id is expired)
	order    []driver.ID            // sessions in open order, for deterministic sweeps
	leases   map[string]lease
	// counters are the token high-water marks, one per bucket of names
	// (tokenBucket): a constant-size table instead of a counter per name
	// ever used, so a released name leaves nothing behind (issue 23).
	// Release never resets them.
	counters [tokenBuckets]uint64
	// delayed holds the names whose last term ended without a release
	// and whose lock-delay has not passed: name → the instant, on
	// cfg.clock, from which it may be granted again. An entry goes at the
	// first call after that instant (sweep), so nothing of a name outlives
	// its delay.
	delayed map[string]time.Time
	epoch   uint64
	// hasEpoch says the namespace's epoch record exists: LoseData deletes
	// it, and the first Acquire that finds it missing recreates it with a
	// quarantine (ADR 0130).
	hasEpoch        bool
	quarantineUntil time.Time // on cfg.clock; no grant before it

	subMu sync.Mutex
	subs  []*subscriber
}

type sess struct {
	owner     driver.Owner
	ttl       time.Duration
	expiresAt time.Time
	version   uint64
	owned     map[string]uint64 // name → token
}

type lease struct {
	owner driver.ID
	token uint64
	delay time.Duration // the lock-delay of the request that won the term
}

func newStore(cfg config) *store {
	return &store{
		cfg:      cfg,
		issued:   map[driver.ID]struct{}{},
		sessions: map[driver.ID]*sess{},
		leases:   map[string]lease{},
		delayed:  map[string]time.Time{},
		hasEpoch: !cfg.uninitialised,
	}
}

// quarantine checks the epoch record, as every Acquire does in the same
// step that grants: a missing record means the namespace's records were
// lost, and it is recreated with a quarantine of one maximum lease from
// now, plus one maximum lock-delay: the lost records took the names'
// lock-delays with them, and a holder paused across the loss must find its
// delay honoured too (ADR 0240). It returns how long grants are still
// refused (0: not quarantined).
func (s *store) quarantine(now time.Time) time.Duration {
	if !s.hasEpoch {
		s.hasEpoch = true
		s.quarantineUntil = now.Add(s.cfg.maxLease + s.cfg.maxLockDelay)
	}
	if s.cfg.noQuarantine {
		return 0
	}
	return max(s.quarantineUntil.Sub(now), 0)
}

// init creates the epoch record if it is missing, without a quarantine.
func (s *store) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hasEpoch = true
}

// sweep ends every session whose lease has run out at now, and returns the
// names it freed so the caller can broadcast them once it has unlocked:
// names of expired terms without a lock-delay, and names whose delay has
// passed. Sessions are visited in open order, and the names whose delay
// passed are sorted, so that a seeded run is reproducible.
func (s *store) sweep(now time.Time) []string {
	var freed []string
	live := s.order[:0]
	for _, id := range s.order {
		se, ok := s.sessions[id]
		if !ok {
			continue
		}
		if now.Before(se.expiresAt) {
			live = append(live, id)
			continue
		}
		// The backend knows when the session ended: the delay counts from
		// there, however late a call finds it.
		freed = append(freed, s.drop(id, se, se.expiresAt)...)
	}
	clear(s.order[len(live):])
	s.order = live
	var over []string
	for name, until := range s.delayed {
		if !now.Before(until) {
			delete(s.delayed, name)
			over = append(over, name)
		}
	}
	sort.Strings(over)
	return append(freed, over...)
}

// drop removes a session and its leases, returning the freed names sorted.
// ended is when the session ended without releasing its leases (expiry):
// each lease with a lock-delay then keeps its name refused until ended +
// its delay, and is not among the freed names (sweep reports it when the
// delay has passed). A zero ended is a Close: the holder said it stopped,
// so no name is delayed (ADR 0240).
func (s *store) drop(id driver.ID, se *sess, ended time.Time) []string {
	names := make([]string, 0, len(se.owned))
	for name, tok := range se.owned {
		l := s.leases[name]
		if l.owner != id || l.token != tok {
			continue
		}
		delete(s.leases, name)
		if !ended.IsZero() && l.delay > 0 {
			s.delayed[name] = ended.Add(l.delay)
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	delete(s.sessions, id)
	return names
}

// tokenBuckets is the size of the token high-water table: the agreed
// 1024 of every backend (docs/adr, issue 23).
const tokenBuckets = 1024

// tokenBucket is name's bucket: FNV-1a 32 of its bytes, mod tokenBuckets.
// The same name always maps to the same bucket, and a bucket only rises,
// so the successive tokens of a name rise strictly; names sharing a
// bucket only skip tokens.
func tokenBucket(name string) int {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return int(h % tokenBuckets)
}

func (s *store) nextToken(name string) uint64 {
	i := tokenBucket(name)
	s.counters[i]++
	return s.epoch<<epochShift | s.counters[i]
}

// remaining is the time se has left as the backend reports it: the granted
// fraction of the real time left.
func (s *store) remaining(se *sess, now time.Time) time.Duration {
	left := se.expiresAt.Sub(now)
	if left <= 0 {
		return 0
	}
	return time.Duration(int64(left) / s.cfg.grantDn * s.cfg.grantNum)
}

func (s *store) open(lease time.Duration, owner driver.Owner) (driver.OpenReply, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	freed := s.sweep(now)
	id := s.cfg.newID()
	if _, dup := s.issued[id]; dup {
		return driver.OpenReply{}, freed, errorf(ErrDuplicateID, "open: id %q was handed out before", id)
	}
	s.issued[id] = struct{}{}
	lease = min(lease, s.cfg.maxLease)
	se := &sess{owner: owner, ttl: lease, expiresAt: now.Add(lease), version: 1, owned: map[string]uint64{}}
	s.sessions[id] = se
	s.order = append(s.order, id)
	return driver.OpenReply{ID: id, Remaining: s.remaining(se, now)}, freed, nil
}

func (s *store) renew(req driver.RenewRequest) (driver.RenewReply, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	freed := s.sweep(now)
	se, ok := s.sessions[req.ID]
	if !ok {
		return driver.RenewReply{}, freed, errorf(driver.ErrExpired, "renew %s", req.ID)
	}
	se.expiresAt = now.Add(se.ttl)
	reply := driver.RenewReply{Remaining: s.remaining(se, now), Version: se.version}
	if req.KnownVersion != se.version {
		reply.Full = true
		reply.Leases = make([]driver.Lease, 0, len(se.owned))
		for name, tok := range se.owned {
			reply.Leases = append(reply.Leases, driver.Lease{Name: name, Token: tok})
		}
		sort.Slice(reply.Leases, func(i, j int) bool { return reply.Leases[i].Name < reply.Leases[j].Name })
	}
	return reply, freed, nil
}

func (s *store) acquire(req driver.AcquireRequest) (driver.AcquireReply, []string, error) {
	if req.LockDelay < 0 || req.LockDelay > s.cfg.maxLockDelay {
		return driver.AcquireReply{}, nil, errorf(driver.ErrLockDelay,
			"acquire: lock-delay %v: want 0 up to the maximum %v (WithMaxLockDelay)", req.LockDelay, s.cfg.maxLockDelay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	freed := s.sweep(now)
	se, ok := s.sessions[req.ID]
	if !ok {
		return driver.AcquireReply{}, freed, errorf(driver.ErrExpired, "acquire for %s", req.ID)
	}
	reply := driver.AcquireReply{Results: make([]driver.AcquireResult, len(req.Names)), Quarantine: s.quarantine(now)}
	changed := false
	for i, name := range req.Names {
		res := &reply.Results[i]
		res.Name = name
		if err := deadline.ValidateName(name); err != nil {
			res.Err = err
			continue
		}
		if reply.Quarantine > 0 {
			continue // no grant, not even a report of a lease held
		}
		// The sweep above removed every lease of an expired session, so a
		// lease still here is held by a live one.
		if l, held := s.leases[name]; held {
			if l.owner == req.ID {
				res.Token = l.token
			}
			continue
		}
		// The sweep above removed every delay that has passed, so a name
		// still here is refused, as held.
		if _, waiting := s.delayed[name]; waiting {
			continue
		}
		res.Token = s.nextToken(name)
		s.leases[name] = lease{owner: req.ID, token: res.Token, delay: req.LockDelay}
		se.owned[name] = res.Token
		changed = true
	}
	if changed {
		se.version++
	}
	return reply, freed, nil
}

func (s *store) release(req driver.ReleaseRequest) ([]string, error) {
	for _, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return nil, errorf(err, "release")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	freed := s.sweep(s.cfg.clock.Now())
	se, ok := s.sessions[req.ID]
	if !ok {
		return freed, nil // its leases went with it
	}
	changed := false
	for _, rl := range req.Leases {
		if l, held := s.leases[rl.Name]; held && l.owner == req.ID && l.token == rl.Token {
			delete(s.leases, rl.Name)
			delete(se.owned, rl.Name)
			freed = append(freed, rl.Name)
			changed = true
		}
	}
	if changed {
		se.version++
	}
	return freed, nil
}

func (s *store) close(id driver.ID) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	freed := s.sweep(s.cfg.clock.Now())
	if se, ok := s.sessions[id]; ok {
		freed = append(freed, s.drop(id, se, time.Time{})...)
	}
	return freed
}

// inspect lists the live holders of the selected names, sorted by name.
func (s *store) inspect(req driver.InspectRequest) ([]driver.Holder, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	freed := s.sweep(now)
	var out []driver.Holder
	add := func(name string, l lease) {
		se := s.sessions[l.owner]
		out = append(out, driver.Holder{Name: name, Token: l.token, Session: l.owner, Owner: se.owner, Remaining: s.remaining(se, now)})
	}
	if len(req.Names) > 0 {
		for _, name := range req.Names {
			if l, ok := s.leases[name]; ok {
				add(name, l)
			}
		}
	} else {
		for name, l := range s.leases {
			if strings.HasPrefix(name, req.Prefix) {
				add(name, l)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, freed
}
