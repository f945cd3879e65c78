package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/serial"
	"github.com/simba-go/simba/internal/tokenjson"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// Errors of the group API.
var (
	// ErrInvalidGroup: the group's name, partition count or member ID
	// breaks a rule; the error names it.
	ErrInvalidGroup = errors.New("simba: invalid group")
	// ErrWouldBlockSelf: Leave or Close was called from one of the group's
	// own callbacks or tasks; the leave was started but not waited for.
	ErrWouldBlockSelf = session.ErrWouldBlockSelf
	// ErrNoInspector: the session's backend cannot list who holds leases,
	// which a group needs to see its members.
	ErrNoInspector = session.ErrNoInspector
	// ErrLeft: StepDown was called on a member that has left or is
	// leaving the group (Leave, Close, or its session closed).
	ErrLeft = errors.New("simba: the member has left the group")
	// ErrPartitionsMismatch (reported to OnError): the live members were
	// configured with different partition counts, as during a rolling
	// deploy that changes it; the group serves the smallest of them until
	// they agree (ADR 0189). The error names each member's count.
	ErrPartitionsMismatch = errors.New("simba: the group's members disagree on the partition count")
	// ErrBlind (reported to OnError): the member could not see the group
	// (its polls failed) for a lease duration, so it withdrew: its member
	// record released and its partitions handed over, so that the members
	// that can see the group take them (ADR 0190). It joins again after
	// its next successful poll.
	ErrBlind = errors.New("simba: the member cannot see its group and withdrew")
)

// Limits of a group's shape, so that every lease name it makes is valid
// (deadline.MaxNameLen) on every backend.
const (
	MaxPartitions  = layer.MaxGroupPartitions
	MaxNameLen     = deadline.MaxNameLen - len(":m:") - maxMemberIDLen - len(".65536")
	maxMemberIDLen = layer.MaxMemberIDLen
)

// Group is one member of a partition group: the members of a group (one
// per session that joined it) share its partitions, each owned by exactly
// one live member under its own lease and fencing token. Create it with
// [Join]; every group lives and ends with its session.
type Group struct {
	s        *session.Session
	eng      layer.Engine // the session's engine hooks
	name     string
	n        int
	id       string
	listener Listener
	tasks    []Task
	onError  func(error)
	queue    *serial.Queue
	spawn    func(p int, t *term.Term, task Task, done func())
	member   layer.Claim
	// lockDelay is the partitions' (WithLockDelay); delayReported (under
	// the session's lock): a refusal of it went to OnError, and no
	// partition was won since.
	lockDelay     time.Duration
	delayReported bool

	// Guarded by the session's lock (session.Do).
	joined     bool // the member record is held
	closed     bool // the session closed
	parts      []*part
	leaving    chan struct{} // closed when Leave has completed
	unwinding  bool          // Leave is still handing partitions over, a chunk per step
	left       bool
	handovers  int // voluntary handovers under way
	pollStop   func() bool
	pollGen    uint64 // the armed poll timer's generation
	inspecting bool
	members    []string // as the last poll saw them
	polls      uint64
	agreed     int             // the partition count the group serves: the smallest a live member has (ADR 0189)
	mismatch   string          // the members' counts when they last disagreed, "" if they agree
	seen       time.Time       // the member record won or a poll answered: the last time the member saw its group
	blind      bool            // withdrawn for not seeing the group (ADR 0190); polling until it does
	holdUntil  time.Time       // a member just joined takes nothing before (ADR 0193)
	cooling    bool            // stepped down: not a member until the cooldown ends
	coolStop   func() bool     // the cooldown's timer
	stepped    []chan struct{} // StepDowns waiting for their handovers
}

// Join makes the session a member of the group name, whose partitions are
// numbered 0 to partitions-1: the member records itself under a lease of
// its own (so it leaves when its session ends), polls the group's members
// every candidate tick, and takes or gives back partitions so that each
// live member owns ⌊N/m⌋ or ⌈N/m⌉ of them (see [Assign]).
//
// It fails with an error wrapping ErrInvalidGroup for a name that is not a
// valid lease name, holds ':', or is longer than MaxNameLen, or a partition
// count outside 1 to MaxPartitions; with ErrNoInspector if the backend
// cannot list lease holders; with session.ErrAlreadyStarted if the session
// is already a member of the group (under any member ID), and with session.ErrClosed after Close.
func Join(s *session.Session, name string, partitions int, opts ...Option) (*Group, error) {
	if err := validate(name, partitions); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("simba: join group %q: nil Session", name)
	}
	eng, ok := layer.Of(s)
	if !ok {
		return nil, fmt.Errorf("simba: join group %q: Session not built by session.New or session.Open", name)
	}
	o := options{exec: election.Goroutines{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.listener == nil {
		o.listener = Funcs{}
	}
	for i, task := range o.tasks {
		if task == nil {
			return nil, fmt.Errorf("%w: RunWhileOwner(nil) (task %d): a task must be a function", ErrInvalidGroup, i)
		}
	}
	if o.lockDelay < 0 {
		return nil, fmt.Errorf("%w: WithLockDelay(%v): the lock-delay must not be negative", ErrInvalidGroup, o.lockDelay)
	}
	if o.memberID == "" {
		// From the session's Env: random in production, seeded in the
		// simulation.
		o.memberID = fmt.Sprintf("%013x", uint64(eng.Jitter()*(1<<52)))
	} else if err := validateMemberID(o.memberID); err != nil {
		return nil, err
	}
	if !s.CanInspect() {
		return nil, fmt.Errorf("simba: join group %q: %w", name, ErrNoInspector)
	}
	g := &Group{
		s:        s,
		eng:      eng,
		name:     name,
		n:        partitions,
		id:       o.memberID,
		listener: o.listener,
		tasks:    o.tasks,
		onError:  o.onError,
		queue:    newQueue(eng, o.exec),
		parts:    make([]*part, partitions),
		agreed:   partitions,
	}
	g.lockDelay = o.lockDelay
	g.spawn = g.goTask
	g.queue.SetOwner(g)
	c, err := eng.Claim(g.memberName(), memberHandler{g})
	if err != nil {
		return nil, fmt.Errorf("simba: join group %q: %w", name, err)
	}
	g.member = c
	// A session is at most one member of a group: two would compete with
	// each other for the same partition claims (the claim of a name is one
	// per session), every tick. The check follows the registration, so
	// that two concurrent Joins cannot both pass it: the snapshot lists
	// claims in registration order, and the member record registered
	// first wins. Member records are the only "group" kind.
	for _, e := range s.Snapshot().Entries {
		if e.Kind == "group" && strings.HasPrefix(e.Name, name+":m:") {
			if e.Name == g.memberName() {
				break
			}
			eng.Do(c.Drop)
			return nil, fmt.Errorf("simba: join group %q: the session is already a member (%s): %w", name, e.Name, session.ErrAlreadyStarted)
		}
	}
	closed := false
	eng.Do(func() {
		c.SetOwner(g)
		if closed = g.closed; !closed {
			c.Want(true)
		}
	})
	if closed {
		return nil, fmt.Errorf("simba: join group %q: %w", name, session.ErrClosed)
	}
	return g, nil
}

// Validate reports whether Join would accept the group's name and
// partition count, with an error wrapping ErrInvalidGroup naming the rule
// otherwise; frameworks use it to fail at configuration time.
func Validate(name string, partitions int) error { return validate(name, partitions) }

func validate(name string, partitions int) error {
	if err := deadline.ValidateName(name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalidGroup, err)
	}
	switch {
	case strings.Contains(name, ":"):
		return fmt.Errorf("%w: name %q holds ':', which separates the group's own lease names", ErrInvalidGroup, name)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: name is %d bytes long, longer than %d", ErrInvalidGroup, len(name), MaxNameLen)
	case partitions < 1 || partitions > MaxPartitions:
		return fmt.Errorf("%w: %d partitions (want 1 to %d)", ErrInvalidGroup, partitions, MaxPartitions)
	}
	return nil
}

func validateMemberID(id string) error {
	bad, ok := layer.ValidMemberID(id)
	switch {
	case ok:
		return nil
	case bad < 0:
		return fmt.Errorf("%w: member ID %q (want 1 to %d characters)", ErrInvalidGroup, id, maxMemberIDLen)
	}
	return fmt.Errorf("%w: member ID %q has byte %q at offset %d (want [A-Za-z0-9_-])", ErrInvalidGroup, id, id[bad], bad)
}

// Name is the group's name.
func (g *Group) Name() string { return g.name }

// Partitions is the number of partitions of the group.
func (g *Group) Partitions() int { return g.n }

// MemberID is this member's ID in the group.
func (g *Group) MemberID() string { return g.id }

// Session is the session the member runs on.
func (g *Group) Session() *session.Session { return g.s }

// memberName is the member record's lease name, which carries the
// member's partition count (ADR 0189).
func (g *Group) memberName() string {
	return g.name + ":m:" + g.id + "." + strconv.Itoa(g.n)
}

func (g *Group) partitionName(p int) string { return g.name + ":p:" + strconv.Itoa(p) }

// partitionOf parses a lease name of the group's partitions; only the
// canonical form of a number in range is one.
func (g *Group) partitionOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, g.name+":p:")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(rest)
	if err != nil || p < 0 || p >= g.n || strconv.Itoa(p) != rest {
		return 0, false
	}
	return p, true
}

// ParsePartitionLease reports whether leaseName is the lease of a
// partition of a group (<group>:p:<partition>), and of which; tools and
// instrumentation (otelsimba) use it to label a partition's term.
func ParsePartitionLease(leaseName string) (groupName string, partition int, ok bool) {
	return layer.GroupPartition(leaseName)
}

// Terms returns the valid terms of the partitions this member owns, by
// partition. Check Valid before acting on one; pass its token to the
// resources you write.
func (g *Group) Terms() map[int]*term.Term {
	out := make(map[int]*term.Term)
	g.eng.Do(func() {
		for _, pt := range g.parts {
			if pt != nil && pt.term != nil && pt.term.Valid() {
				out[pt.p] = pt.term
			}
		}
	})
	return out
}

// Snapshot is a member's view of its group, serialisable as JSON.
type Snapshot struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// Agreed is the partition count the group serves as the last poll saw
	// it: the smallest of the live members' (ADR 0189); Partitions
	// unless they disagree.
	Agreed int `json:"agreed"`
	// Mismatch names each member's partition count while they disagree
	// ("a=12 b=16"), empty otherwise.
	Mismatch string   `json:"mismatch,omitempty"`
	Member   string   `json:"member"`
	Status   string   `json:"status"`  // JOINING, MEMBER, COOLDOWN, WITHDRAWN, LEAVING or LEFT
	Members  []string `json:"members"` // as the last poll saw them
	Owned    []Owned  `json:"owned"`   // by partition
}

// Owned is a partition the member holds a term for. In JSON the token is
// a string (ADR 0196).
type Owned struct {
	Partition int              `json:"partition"`
	Token     uint64           `json:"token,string"`
	Valid     bool             `json:"valid"`
	Remaining session.Duration `json:"remaining"`
}

// UnmarshalJSON reads the token as a string or, as v0.1.0 wrote it, a
// number.
func (o *Owned) UnmarshalJSON(b []byte) error {
	type plain Owned
	w := struct {
		*plain
		Token tokenjson.Token `json:"token"`
	}{plain: (*plain)(o), Token: tokenjson.Token(o.Token)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	o.Token = uint64(w.Token)
	return nil
}

// Snapshot returns the member's view of the group: the members it last
// saw and the partitions it owns, with their tokens.
func (g *Group) Snapshot() Snapshot {
	var snap Snapshot
	g.eng.Do(func() {
		snap = Snapshot{Name: g.name, Partitions: g.n, Agreed: g.agreed, Mismatch: g.mismatch, Member: g.id, Status: g.status(), Members: append([]string(nil), g.members...), Owned: []Owned{}}
		for _, pt := range g.parts {
			if pt != nil && pt.term != nil {
				r := pt.term.Remaining()
				snap.Owned = append(snap.Owned, Owned{Partition: pt.p, Token: pt.term.Token(), Valid: r > 0, Remaining: session.Duration(r)})
			}
		}
	})
	return snap
}

// status names the member's state. Lock held.
func (g *Group) status() string {
	switch {
	case g.left:
		return "LEFT"
	case g.leaving != nil || g.closed:
		return "LEAVING"
	case g.cooling:
		return "COOLDOWN"
	case g.blind:
		return "WITHDRAWN"
	case g.joined:
		return "MEMBER"
	}
	return "JOINING"
}

// Leave ends the membership: the member record is released first (so the
// others stop counting this member), then every partition is handed over
// in order (its term revoked with STOPPED, its lease kept until its tasks
// return or the term's remaining time runs out, released with its token,
// then OnRevoked). Leave waits for all that, or for ctx. Called from the
// group's own callback or task, it does not wait and returns
// ErrWouldBlockSelf. Nothing is delivered to the listener once Leave has
// completed.
func (g *Group) Leave(ctx context.Context) error {
	done := g.leave()
	select {
	case <-done:
		return nil
	default:
	}
	if g.eng.WouldWaitForSelf(ctx, g) {
		return ErrWouldBlockSelf
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("simba: leaving group %q: %w", g.name, context.Cause(ctx))
	}
}

// Close is Leave without a deadline, for io.Closer.
func (g *Group) Close() error { return g.Leave(context.Background()) }

// leaveChunk is how many partitions one step of a Leave hands over
// under the engine's lock: a group of 65,536 would otherwise hold it for
// the whole loop, and renewals wait (issue 20, item 8).
const leaveChunk = 1024

func (g *Group) leave() <-chan struct{} {
	var ch chan struct{}
	started := false
	g.eng.Do(func() {
		if g.leaving != nil {
			ch = g.leaving
			return
		}
		started = true
		ch = make(chan struct{})
		g.leaving = ch
		g.unwinding = true
		g.stopPoll()
		g.stopCooldown()
		g.member.Want(false)
		g.member.Release(term.Stopped, nil)
	})
	if !started {
		return ch
	}
	// The partitions not yet handed over stay wanted between steps; a
	// term won meanwhile is given back (Won sees leaving), and the Leave
	// completes only after the last step (unwinding).
	for i := 0; i < len(g.parts); i += leaveChunk {
		chunk := g.parts[i:min(i+leaveChunk, len(g.parts))]
		last := i+leaveChunk >= len(g.parts)
		g.eng.Do(func() {
			for _, pt := range chunk {
				if pt != nil {
					pt.unwant(term.Stopped)
				}
			}
			if last {
				g.unwinding = false
				g.checkLeft()
			}
		})
	}
	return ch
}

// checkLeft completes the StepDowns and the Leave waiting for the
// handovers under way, once there are none. Lock held.
func (g *Group) checkLeft() {
	if g.handovers > 0 {
		return
	}
	if stepped := g.stepped; len(stepped) > 0 {
		g.stepped = nil
		g.eng.Defer(func() {
			g.queue.WhenIdle(func() { // after the OnRevoked of every handover
				for _, ch := range stepped {
					close(ch)
				}
			})
		})
	}
	if g.leaving == nil || g.left || g.unwinding {
		return
	}
	g.left = true
	g.member.Drop()
	for _, pt := range g.parts {
		if pt != nil {
			pt.maybeDrop()
		}
	}
	ch := g.leaving
	g.eng.Defer(func() {
		g.queue.WhenIdle(func() {
			g.queue.Close()
			close(ch)
		})
	})
}

// report hands err to OnError once the engine's lock is released, marked
// as the group's callback on the delivery loop: OnError may call into the
// group or the session (Snapshot, State), and a Leave or Close from it
// returns ErrWouldBlockSelf instead of waiting for the loop it blocks
// (issue 20, item 11). Lock held.
func (g *Group) report(err error) {
	if g.onError == nil {
		return
	}
	g.eng.Defer(func() {
		g.eng.Inside(g, true, func() { g.onError(err) })
	})
}

// ---- polling and rebalancing

func (g *Group) stopPoll() {
	g.pollGen++
	if g.pollStop != nil {
		g.pollStop()
		g.pollStop = nil
	}
}

// armPoll schedules the next poll one candidate tick from now. Lock held.
func (g *Group) armPoll() {
	g.stopPoll()
	if g.closed || g.leaving != nil || g.cooling {
		return
	}
	d := g.s.Config().RetryDelay(g.eng.Jitter())
	if wait := g.holdUntil.Sub(g.eng.Now()); wait > 0 && g.joined {
		d = wait // the poll that ends a newcomer's hold, on time
	}
	gen := g.pollGen
	g.pollStop = g.eng.AfterFunc(d, func() {
		g.eng.Do(func() {
			if g.pollGen == gen { // not stopped or re-armed meanwhile
				g.pollStop = nil
				g.poll()
			}
		})
	})
}

// poll reads the group's member records and partition holders in one
// backend call, then rebalances. Lock held.
func (g *Group) poll() {
	g.stopPoll()
	if g.closed || g.leaving != nil || g.inspecting {
		return
	}
	if !g.joined && !g.blind {
		g.armPoll()
		return
	}
	g.inspecting = true
	g.polls++
	req := session.InspectRequest{Prefix: g.name + ":"}
	g.eng.Call(func(ctx context.Context) (any, error) {
		return g.s.Inspect(ctx, req)
	}, func(v any, err error) {
		hs, _ := v.([]session.Holder)
		g.inspecting = false
		if g.closed || g.leaving != nil || g.cooling {
			return
		}
		switch {
		case err != nil:
			g.report(fmt.Errorf("simba: group %q: poll members: %w", g.name, err))
			if g.joined && g.blindFor() >= g.s.Config().LeaseDuration {
				g.withdraw()
			}
		case g.blind:
			// It sees its group again: it joins again, as a newcomer.
			g.blind = false
			g.member.Want(true)
		default:
			g.seen = g.eng.Now()
			g.rebalance(hs)
		}
		g.armPoll()
	})
}

// blindFor is how long the member has been unable to see its group while
// its session was LIVE: since its last successful poll (or its record's
// win), or since the session last became LIVE if that is later; zero
// while the session is not LIVE. A poll that fails while the renewals
// fail too is a backend down for every call, not a blind member: the
// session's deadline ends the terms if the outage lasts, and a
// withdrawal would move every partition of the group across an outage
// the terms survive (ADR 0226). Lock held.
func (g *Group) blindFor() time.Duration {
	since, live := g.eng.LiveSince()
	if !live {
		return 0
	}
	if g.seen.After(since) {
		since = g.seen
	}
	return g.eng.Now().Sub(since)
}

// withdraw takes a member that has not seen its group for a lease
// duration out of it, as a step down would, but polling on: the others,
// who may see the group, stop reserving its share and take its partitions
// once it has handed them over; it joins again when a poll succeeds
// (ADR 0190). A member that cannot poll keeps nothing from the others for
// longer than that. Lock held.
func (g *Group) withdraw() {
	g.blind = true
	g.joined = false
	g.report(fmt.Errorf("simba: group %q: %w (no successful poll since %v)", g.name, ErrBlind, g.seen.Format(time.RFC3339Nano)))
	g.member.Want(false)
	g.member.Release(term.SteppedDown, nil)
	for _, pt := range g.parts {
		if pt != nil {
			pt.unwant(term.SteppedDown)
		}
	}
}

// rebalance computes the assignment from what a poll saw and applies this
// member's share: partitions it should no longer own are handed over,
// partitions it should own are wanted, all in one acquisition. Lock held.
//
// The members may disagree on the partition count (a rolling deploy that
// changes it): each record carries its member's, and the group serves the
// smallest, so that every member serves only partitions it knows and
// every member computes the same assignment; a disagreement is reported
// to every member each time it changes (ADR 0189).
func (g *Group) rebalance(hs []session.Holder) {
	bySession := make(map[session.ID]string)
	var members, counts []string
	agreed, differ := 0, false
	older, counted := map[string]bool{}, map[string]bool{}
	for _, h := range hs {
		grp, id, n, ok := layer.GroupMember(h.Name)
		if !ok || grp != g.name {
			continue
		}
		if id == g.id && !g.joined {
			continue
		}
		if n == 0 {
			n = g.n // a record of an older version carries no count
			older[id] = true
		} else {
			counted[id] = true
		}
		if agreed == 0 || n < agreed {
			agreed = n
		}
		differ = differ || n != g.n
		members = append(members, id)
		counts = append(counts, id+"="+strconv.Itoa(n))
		bySession[h.Session] = id
	}
	if agreed == 0 || agreed > g.n {
		// No member seen, or only others (this member's record not yet
		// in the view): it takes nothing, and never reads past its own
		// count.
		agreed = g.n
	}
	g.agreed = agreed
	if !differ {
		g.mismatch = ""
	} else if m := strings.Join(counts, " "); m != g.mismatch {
		g.mismatch = m
		g.reportMismatch(agreed, m)
	}
	current := make([]string, g.n)
	for _, h := range hs {
		if p, ok := g.partitionOf(h.Name); ok {
			current[p] = bySession[h.Session]
		}
	}
	me := false
	for _, m := range members {
		me = me || m == g.id
	}
	// What this member holds now beats what the poll saw: the poll may
	// have been answered before a win, and giving back a partition just
	// won would be churn.
	if me {
		for _, pt := range g.parts {
			if pt != nil && pt.term != nil && pt.term.Valid() {
				current[pt.p] = g.id
			}
		}
	}
	g.members = members
	owners := Assign(agreed, members, current[:agreed])
	g.coverOlder(owners, current[:agreed], members, older, counted)
	now := g.eng.Now()
	hold := now.Before(g.holdUntil)
	var take []*part
	for p := range g.parts {
		pt := g.parts[p]
		mine := me && p < agreed && owners[p] == g.id
		switch {
		case mine && (pt == nil || !pt.want):
			if hold {
				continue
			}
			if pt == nil {
				pt = &part{g: g, p: p}
				g.parts[p] = pt
			}
			if now.Before(pt.coolUntil) {
				continue
			}
			take = append(take, pt)
		case !mine && pt != nil && pt.want:
			pt.unwant(term.SteppedDown)
		}
	}
	g.want(take)
}

// coverOlder rewrites owners so that no partition is left to a member of
// an older version (a record with no count, ADR 0189) that may never take
// it. Such a member computes its share among the older members alone and
// serves only partitions below its own count, which nobody can read: a
// share the newer members leave it may hold a partition at or above that
// count, or one a newer member holds, and stay unowned for as long as it
// lives (a rolling deploy that also changes the count). So a partition
// the assignment gives an older member is its own only while it holds it;
// one a newer member holds stays with that member, and one nobody holds
// goes to the newer members, by the same assignment computed among them
// alone (every newer member computes the same from the same view). The
// older member may then want it too: the lease decides, whoever holds it
// keeps it, and nothing flaps. Fairness returns when the older members
// are gone. Lock held.
func (g *Group) coverOlder(owners, current, members []string, older, counted map[string]bool) {
	for id := range counted {
		delete(older, id) // the same ID restarted at this version
	}
	delete(older, g.id)
	if len(older) == 0 {
		return
	}
	var newer []string
	for _, m := range members {
		if !older[m] {
			newer = append(newer, m)
		}
	}
	var alt []string
	for p, o := range owners {
		if !older[o] {
			continue
		}
		switch h := current[p]; {
		case older[h]:
		case h != "":
			owners[p] = h
		default:
			if alt == nil {
				alt = Assign(len(owners), newer, current)
			}
			owners[p] = alt[p]
		}
	}
}

// reportMismatch tells OnError and a MismatchListener that the members
// disagree on the partition count. Lock held.
func (g *Group) reportMismatch(agreed int, counts string) {
	g.report(fmt.Errorf("simba: group %q: %w (%s): serving %d partitions until they agree", g.name, ErrPartitionsMismatch, counts, agreed))
	if l, ok := g.listener.(MismatchListener); ok {
		g.eng.Defer(func() {
			g.queue.Push(func() { l.OnPartitionsMismatch(agreed, counts) }, nil)
		})
	}
}

// want makes the member compete for pts: the claims that exist want at
// once, in one batch; missing claims are registered outside the lock, then
// want in a second batch. Lock held.
func (g *Group) want(pts []*part) {
	var ready []layer.Claim
	var need []*part
	for _, pt := range pts {
		pt.want = true
		switch {
		case pt.hand != nil: // wanted again when its handover completes
		case pt.c != nil:
			ready = append(ready, pt.c)
		case !pt.claiming:
			pt.claiming = true
			need = append(need, pt)
		}
	}
	g.eng.WantAll(ready)
	if len(need) > 0 {
		g.eng.Defer(func() { g.claim(need) })
	}
}

// claim registers the claims of pts (no lock held), then makes those still
// wanted compete.
func (g *Group) claim(pts []*part) {
	cs := make([]layer.Claim, len(pts))
	errs := make([]error, len(pts))
	for i, pt := range pts {
		cs[i], errs[i] = g.eng.Claim(g.partitionName(pt.p), pt)
	}
	g.eng.Do(func() {
		var ready []layer.Claim
		for i, pt := range pts {
			pt.claiming = false
			if errs[i] != nil {
				pt.want = false
				g.report(fmt.Errorf("simba: group %q: claim partition %d: %w", g.name, pt.p, errs[i]))
				continue
			}
			pt.c = cs[i]
			pt.c.SetOwner(g) // the partition's callbacks and tasks are the group's
			// A rebalance's releases come as a stream, each when its old
			// owner's task returns: answered in one Acquire per window,
			// not one each (ADR 0102).
			pt.c.PaceNotices()
			if pt.want && !g.closed && g.leaving == nil {
				ready = append(ready, pt.c)
			} else {
				pt.want = false
				pt.maybeDrop()
			}
		}
		g.eng.WantAll(ready)
	})
}

// goTask runs a task on a session goroutine under the term's context.
func (g *Group) goTask(p int, t *term.Term, task Task, done func()) {
	g.eng.Go(g, func() {
		defer done()
		_ = task(t.Context(), p, t)
	})
}

// memberHandler hears about the member record's lease.
type memberHandler struct{ g *Group }

func (m memberHandler) Won(*term.Term) {
	g := m.g
	if g.leaving != nil {
		g.member.Release(term.Stopped, nil)
		return
	}
	if g.cooling || g.blind { // won by an attempt sent before the step down or the withdrawal
		g.member.Release(term.SteppedDown, nil)
		return
	}
	g.joined = true
	g.seen = g.eng.Now()
	// Members that start together, or leave a quarantine together, win
	// their records up to one candidate tick apart: the first to poll
	// would see itself alone, take every partition and give most back a
	// moment later. A newcomer takes nothing until every member that
	// started with it has had a tick to record itself (ADR 0193).
	cfg := g.s.Config()
	g.holdUntil = g.seen.Add(cfg.RetryDelay(0) + cfg.RetryJitter + cfg.RenewInterval/10)
	g.poll()
}

func (m memberHandler) Lost(*term.Term, term.RevokeReason) {
	// The session expired or closed: its partitions' terms end with it,
	// each reported by its own claim. The engine competes again for the
	// record in the next backend session.
	m.g.joined = false
}

func (m memberHandler) Closed() {
	g := m.g
	g.closed = true
	g.joined = false
	g.stopPoll()
	g.stopCooldown()
}

// GroupLease marks the member record as a group's own lease, which the
// session lets only a group claim (ADR 0191).
func (memberHandler) GroupLease() {}

func (m memberHandler) Describe() (kind, status string) {
	g := m.g
	owned := 0
	for _, pt := range g.parts {
		if pt != nil && pt.term != nil {
			owned++
		}
	}
	return "group", fmt.Sprintf("%s %d/%d", g.status(), owned, g.n)
}

// termState tracks one term's callbacks: if the executor refused its
// OnAssigned, its OnRevoked is not delivered either, so callbacks stay
// paired.
type termState struct {
	t       *term.Term
	refused atomic.Bool
}
