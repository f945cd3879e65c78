// Package statuspage serves a Simba session's state to people and tools:
// JSON of the session, the holders of the names the process watches (who,
// since when, last renewal seen), partition groups, and the transitions
// seen, and a small HTML page that refreshes it live (no framework, no
// external assets).
//
//	h, err := statuspage.New(s, statuspage.Watch("billing"), statuspage.WatchGroup("orders", 8))
//	mux.Handle("/simba/", http.StripPrefix("/simba", h))
//
// GET / is the page; GET /status.json the JSON. In the JSON, fencing
// tokens are strings (a JSON number loses precision above 2^53 in a
// browser or jq), durations are integers of milliseconds in fields ending
// in _ms, and times are RFC 3339 strings.
package statuspage

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
)

//go:embed page.html
var page []byte

// ErrInvalidOption is wrapped by the error [New] returns for an invalid
// option.
var ErrInvalidOption = errors.New("statuspage: invalid option")

// DefaultInspectTimeout bounds each inspection of the backend: with the
// backend down, /status.json answers within it, from what it saw last.
const DefaultInspectTimeout = time.Second

// minInspectInterval is the least time between two inspections: pages and
// scripts polling at once share one.
const minInspectInterval = 250 * time.Millisecond

// maxTransitions is how many transitions the page keeps.
const maxTransitions = 50

// An Option configures a Handler.
type Option func(*config)

type config struct {
	names    []string
	prefixes []string
	groups   []groupSpec
	timeout  time.Duration
	errs     []error
}

type groupSpec struct {
	name       string
	partitions int
}

// Watch adds lease names whose holders the page shows (whoever holds them,
// this process or another). Each must be a valid lease name.
func Watch(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			if err := deadline.ValidateName(n); err != nil {
				c.errs = append(c.errs, fmt.Errorf("%w: Watch(%q): %w", ErrInvalidOption, n, err))
				continue
			}
			c.names = append(c.names, n)
		}
	}
}

// WatchPrefix shows the holders of every lease whose name starts with
// prefix (for example "billing-" for billing-eu, billing-us), found by
// the backend's inspection, without listing them.
func WatchPrefix(prefix string) Option {
	return func(c *config) {
		if err := deadline.ValidateName(prefix); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WatchPrefix(%q): %w", ErrInvalidOption, prefix, err))
			return
		}
		c.prefixes = append(c.prefixes, prefix)
	}
}

// WatchGroup shows the partition group name of partitions partitions:
// its members, the partitions each owns and those nobody owns, with the
// holder of every partition (group.Join's lease names, found by prefix).
func WatchGroup(name string, partitions int) Option {
	return func(c *config) {
		if err := group.Validate(name, partitions); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WatchGroup: %w", ErrInvalidOption, err))
			return
		}
		c.groups = append(c.groups, groupSpec{name, partitions})
	}
}

// InspectTimeout bounds each inspection of the backend (default
// [DefaultInspectTimeout]); it must be positive.
func InspectTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: InspectTimeout(%v): must be positive", ErrInvalidOption, d))
			return
		}
		c.timeout = d
	}
}

// Identity is the session option that names this process for the page
// and every tool asking who holds a lease: identity host/pid, and metadata
// host, pid and version (version "" takes the main module's version from
// the build information).
func Identity(version string) session.Option {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if version == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			version = bi.Main.Version
		}
	}
	pid := strconv.Itoa(os.Getpid())
	md := map[string]string{"host": host, "pid": pid}
	if version != "" {
		md["version"] = version
	}
	id := host + "/" + pid
	if len(id) > deadline.MaxIdentityLen {
		id = id[len(id)-deadline.MaxIdentityLen:]
	}
	return session.WithIdentity(id, md)
}

// Status is what /status.json answers.
type Status struct {
	Now     time.Time `json:"now"`
	Session Session   `json:"session"`
	// Owner is this process's session owner.
	Owner Owner `json:"owner"`
	// Holders of the watched names and prefixes, by name, as the backend
	// last reported them (see Backend); a name nobody holds is absent.
	Holders []Holder `json:"holders"`
	Groups  []Group  `json:"groups"`
	// Transitions seen by this page, newest first: a name changing hands,
	// becoming free or taken. Seen when the page inspected, so At is when
	// the page noticed, not when it happened.
	Transitions []Transition `json:"transitions"`
	Backend     Backend      `json:"backend"`
}

// Session is this process's session.
type Session struct {
	ID           string  `json:"id"`
	State        string  `json:"state"`
	InStateMS    int64   `json:"in_state_ms"`
	RemainingMS  int64   `json:"remaining_ms"`
	RenewEveryMS int64   `json:"renew_every_ms"`
	Entries      []Entry `json:"entries"`
}

// Entry is one election, lock or group registered on this process's
// session.
type Entry struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Status      string `json:"status,omitempty"`
	Token       string `json:"token,omitempty"`
	Valid       bool   `json:"valid"`
	RemainingMS int64  `json:"remaining_ms"`
}

// Owner is who a session belongs to: the identity it was opened with and
// its metadata, with host, pid and version drawn out of the metadata (or,
// for host and pid, out of the default identity host/pid).
type Owner struct {
	Identity string            `json:"identity"`
	Host     string            `json:"host,omitempty"`
	PID      string            `json:"pid,omitempty"`
	Version  string            `json:"version,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Holder is the holder of a lease.
type Holder struct {
	Name    string `json:"name"`
	Token   string `json:"token"`
	Session string `json:"session"`
	Owner   Owner  `json:"owner"`
	// Mine: held by this process's session.
	Mine bool `json:"mine"`
	// RemainingMS is the time the holder's session had left by the
	// backend's clock when the backend answered (Backend.InspectedAt).
	RemainingMS int64 `json:"remaining_ms"`
	// HeldSince is when this page first saw the lease held under this
	// token. HeldBeforePage says it was already held when the page first
	// looked: then it is held since HeldSince or earlier.
	HeldSince      time.Time `json:"held_since"`
	HeldBeforePage bool      `json:"held_before_page"`
	// HeldSinceAfter is the page's previous look, at which the lease was
	// not held under this token: it was taken between HeldSinceAfter and
	// HeldSince. The page looks only when asked, so after a night with no
	// page open the two may be hours apart. Absent with HeldBeforePage.
	HeldSinceAfter *time.Time `json:"held_since_after,omitempty"`
	// RenewedAgoMS bounds the time since the holder's last renewal: the
	// page saw the holder's remaining time rise between two inspections,
	// the earlier of which was this long ago. Null until one is seen (and
	// on backends that report no remaining time for other sessions).
	RenewedAgoMS *int64 `json:"renewed_ago_ms"`
}

// Group is a watched partition group.
type Group struct {
	Name string `json:"name"`
	// Partitions is the count the page was given (WatchGroup).
	Partitions int `json:"partitions"`
	// ServingPartitions is the count the group serves: members that
	// disagree (a rolling deploy changing it) serve the smallest their
	// member records carry; Partitions when no record carries one.
	ServingPartitions int `json:"serving_partitions"`
	// Unowned are the partitions, of those served, nobody holds.
	Unowned []int         `json:"unowned"`
	Members []GroupMember `json:"members"`
	// Holders of the partitions, by partition.
	Holders []PartitionHolder `json:"holders"`
}

// GroupMember is a member of a group, with the partitions it owns.
type GroupMember struct {
	Session    string `json:"session"`
	Owner      Owner  `json:"owner"`
	Mine       bool   `json:"mine"`
	Partitions []int  `json:"partitions"`
	// ConfiguredPartitions is the partition count the member was
	// configured with, from its member record (0: a record of a version
	// that carried none, or a member whose record is gone).
	ConfiguredPartitions int `json:"configured_partitions"`
}

// PartitionHolder is the holder of one partition.
type PartitionHolder struct {
	Partition int `json:"partition"`
	Holder
}

// Transition is a change of a lease's holder seen by the page.
type Transition struct {
	At   time.Time `json:"at"`
	Name string    `json:"name"`
	// From and To are the holders before and after; nil when free.
	From *TransitionSide `json:"from"`
	To   *TransitionSide `json:"to"`
}

// TransitionSide is one side of a transition.
type TransitionSide struct {
	Token   string `json:"token"`
	Session string `json:"session"`
	Owner   Owner  `json:"owner"`
}

// Backend is how the page's inspection of the backend went.
type Backend struct {
	// OK: the latest inspection succeeded.
	OK bool `json:"ok"`
	// Error is the latest inspection's failure; ErrorSince when failures
	// began.
	Error      string     `json:"error,omitempty"`
	ErrorSince *time.Time `json:"error_since,omitempty"`
	// InspectedAt is when the holders shown were read (the latest success).
	InspectedAt *time.Time `json:"inspected_at,omitempty"`
	// Stale: the holders shown are older than the latest attempt.
	Stale bool `json:"stale"`
	// InspectMS is how long the latest finished inspection took.
	InspectMS int64 `json:"inspect_ms"`
}

// Handler serves the page and the JSON.
type Handler struct {
	s   *session.Session
	cfg config
	mux *http.ServeMux

	mu       sync.Mutex
	running  chan struct{} // closed when the inspection in flight ends; nil if none
	tried    time.Time     // when the latest inspection started
	good     []session.Holder
	goodAt   time.Time
	err      error
	errSince time.Time
	took     time.Duration
	seen     map[string]*track
	everOK   bool
	trans    []Transition // oldest first
}

// track is what the page remembers of a held lease between inspections.
type track struct {
	token          uint64
	session        string
	owner          Owner
	since          time.Time
	sinceAfter     time.Time // the previous look, when it was not held so; zero with beforePage
	beforePage     bool
	remaining      time.Duration
	at             time.Time
	renewedNoLater time.Time // the renewal seen happened after this; zero if none
}

// New returns the handler for s. It fails, wrapping [ErrInvalidOption],
// for an invalid name, prefix, group or timeout.
func New(s *session.Session, opts ...Option) (*Handler, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil session", ErrInvalidOption)
	}
	c := config{timeout: DefaultInspectTimeout}
	for _, o := range opts {
		o(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	h := &Handler{s: s, cfg: c, mux: http.NewServeMux(), seen: make(map[string]*track)}
	h.mux.HandleFunc("GET /status.json", h.json)
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// Revalidated on every load: after a deploy the page's script must
		// match the JSON the new version serves.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	return h, nil
}

// watches reports whether the page inspects the backend at all.
func (h *Handler) watches() bool {
	return len(h.cfg.names) > 0 || len(h.cfg.prefixes) > 0 || len(h.cfg.groups) > 0
}

// inspect asks the backend for every watched name, prefix and group,
// within the inspection timeout.
func (h *Handler) inspect() ([]session.Holder, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	var all []session.Holder
	if len(h.cfg.names) > 0 {
		hs, err := h.s.Inspect(ctx, session.InspectRequest{Names: h.cfg.names})
		if err != nil {
			return nil, err
		}
		all = append(all, hs...)
	}
	prefixes := slices.Clone(h.cfg.prefixes)
	for _, g := range h.cfg.groups {
		prefixes = append(prefixes, g.name+":") // members (:m:) and partitions (:p:)
	}
	for _, p := range prefixes {
		hs, err := h.s.Inspect(ctx, session.InspectRequest{Prefix: p})
		if err != nil {
			return nil, err
		}
		all = append(all, hs...)
	}
	slices.SortFunc(all, func(a, b session.Holder) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(all, func(a, b session.Holder) bool { return a.Name == b.Name }), nil
}

// refresh returns a channel closed when an inspection no older than
// minInspectInterval has ended, starting one unless one is in flight.
// Every caller shares the inspection in flight: however many pages poll,
// the backend sees one inspection at a time.
func (h *Handler) refresh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running != nil {
		return h.running
	}
	done := make(chan struct{})
	if !h.tried.IsZero() && time.Since(h.tried) < minInspectInterval {
		close(done)
		return done
	}
	h.running = done
	h.tried = time.Now()
	go func() {
		start := time.Now()
		hs, err := h.inspect()
		now := time.Now()
		h.mu.Lock()
		h.took = now.Sub(start)
		if err != nil {
			if h.err == nil {
				h.errSince = start
			}
			h.err = err
		} else {
			h.err = nil
			h.observe(now, hs)
			h.good, h.goodAt = hs, now
			h.everOK = true
		}
		h.running = nil
		h.mu.Unlock()
		close(done)
	}()
	return done
}

// observe updates what the page remembers from a successful inspection
// at now, and records the transitions since the previous one. h.mu held.
func (h *Handler) observe(now time.Time, hs []session.Holder) {
	present := make(map[string]bool, len(hs))
	for _, x := range hs {
		present[x.Name] = true
		t := h.seen[x.Name]
		if t != nil && t.token == x.Token && t.session == string(x.Session) {
			if x.Remaining > t.remaining {
				t.renewedNoLater = t.at
			}
			t.remaining, t.at = x.Remaining, now
			continue
		}
		o := owner(x.Owner)
		if t != nil || h.everOK {
			// A new holder of a name watched before, or a name taken since
			// the last look (a name absent before was free).
			tr := Transition{At: now, Name: x.Name, To: &TransitionSide{Token: tokenText(x.Token), Session: string(x.Session), Owner: o}}
			if t != nil {
				tr.From = &TransitionSide{Token: tokenText(t.token), Session: t.session, Owner: t.owner}
			}
			h.addTransition(tr)
		}
		tr := &track{token: x.Token, session: string(x.Session), owner: o, since: now,
			beforePage: !h.everOK, remaining: x.Remaining, at: now}
		if h.everOK {
			tr.sinceAfter = h.goodAt // observe runs before goodAt moves to now
		}
		h.seen[x.Name] = tr
	}
	for name, t := range h.seen {
		if !present[name] {
			h.addTransition(Transition{At: now, Name: name, From: &TransitionSide{Token: tokenText(t.token), Session: t.session, Owner: t.owner}})
			delete(h.seen, name)
		}
	}
}

func (h *Handler) addTransition(t Transition) {
	h.trans = append(h.trans, t)
	if len(h.trans) > maxTransitions {
		h.trans = slices.Delete(h.trans, 0, len(h.trans)-maxTransitions)
	}
}

// Status gathers the current status. It inspects the backend (one
// inspection shared by concurrent callers, bounded by the inspection
// timeout) and returns within that bound even when the backend does not
// answer, with the holders last seen, marked stale. ctx may end the wait
// sooner.
func (h *Handler) Status(ctx context.Context) Status {
	if h.watches() {
		t := time.NewTimer(h.cfg.timeout)
		select {
		case <-h.refresh():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	now := time.Now()
	snap := h.s.Snapshot()
	st := Status{
		Now:         now.UTC(),
		Owner:       owner(h.s.Owner()),
		Holders:     []Holder{},
		Groups:      []Group{},
		Transitions: []Transition{},
		Session: Session{ID: string(snap.ID), State: snap.State.String(), InStateMS: ms(time.Duration(snap.InState)),
			RemainingMS: ms(time.Duration(snap.Remaining)), RenewEveryMS: ms(time.Duration(snap.RenewEvery)), Entries: []Entry{}},
	}
	for _, e := range snap.Entries {
		en := Entry{Name: e.Name, Kind: e.Kind, Status: e.Status, Valid: e.Valid, RemainingMS: ms(time.Duration(e.Remaining))}
		if e.Token != 0 {
			en.Token = tokenText(e.Token)
		}
		st.Session.Entries = append(st.Session.Entries, en)
	}
	if !h.watches() {
		st.Backend.OK = true
		return st
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st.Backend = Backend{OK: h.err == nil && h.everOK, InspectMS: ms(h.took)}
	if h.everOK {
		at := h.goodAt.UTC()
		st.Backend.InspectedAt = &at
	}
	switch {
	case h.err != nil:
		st.Backend.Error = h.err.Error()
		since := h.errSince.UTC()
		st.Backend.ErrorSince = &since
	case h.running != nil && !h.everOK:
		st.Backend.Error = fmt.Sprintf("the backend has not answered the first inspection within %v", h.cfg.timeout)
	case h.running != nil:
		st.Backend.Error = fmt.Sprintf("the backend has not answered for %v", now.Sub(h.tried).Round(time.Millisecond))
	}
	st.Backend.Stale = st.Backend.Error != ""
	if st.Backend.Stale {
		st.Backend.OK = false
	}
	mine := string(snap.ID)
	groups := make(map[string]*Group, len(h.cfg.groups))
	for _, g := range h.cfg.groups {
		st.Groups = append(st.Groups, Group{Name: g.name, Partitions: g.partitions, Unowned: []int{}, Members: []GroupMember{}, Holders: []PartitionHolder{}})
	}
	for i := range st.Groups {
		groups[st.Groups[i].Name] = &st.Groups[i]
	}
	listed := make(map[string]bool, len(h.cfg.names))
	for _, n := range h.cfg.names {
		listed[n] = true
	}
	for _, x := range h.good {
		hd := h.holder(now, x, mine)
		if g, p, ok := group.ParsePartitionLease(x.Name); ok && groups[g] != nil {
			// Every partition held is shown, also beyond the page's
			// count (members configured with more, as a deploy goes).
			groups[g].Holders = append(groups[g].Holders, PartitionHolder{Partition: p, Holder: hd})
		} else if g, _, n, ok := layer.GroupMember(x.Name); ok && groups[g] != nil {
			groups[g].Members = append(groups[g].Members, GroupMember{Session: hd.Session, Owner: hd.Owner, Mine: hd.Mine, Partitions: []int{}, ConfiguredPartitions: n})
		}
		if listed[x.Name] || h.byPrefix(x.Name) {
			st.Holders = append(st.Holders, hd)
		}
	}
	for i := range st.Groups {
		g := &st.Groups[i]
		slices.SortFunc(g.Holders, func(a, b PartitionHolder) int { return a.Partition - b.Partition })
		owned := make(map[int]bool, len(g.Holders))
		for _, ph := range g.Holders {
			owned[ph.Partition] = true
			found := false
			for j := range g.Members {
				if g.Members[j].Session == ph.Session {
					g.Members[j].Partitions = append(g.Members[j].Partitions, ph.Partition)
					found = true
				}
			}
			if !found { // a holder whose member lease is gone (leaving, or expired on the backend)
				g.Members = append(g.Members, GroupMember{Session: ph.Session, Owner: ph.Owner, Mine: ph.Mine, Partitions: []int{ph.Partition}})
			}
		}
		g.ServingPartitions = 0
		for _, m := range g.Members {
			if m.ConfiguredPartitions > 0 && (g.ServingPartitions == 0 || m.ConfiguredPartitions < g.ServingPartitions) {
				g.ServingPartitions = m.ConfiguredPartitions
			}
		}
		if g.ServingPartitions == 0 {
			g.ServingPartitions = g.Partitions
		}
		for p := range g.ServingPartitions {
			if !owned[p] {
				g.Unowned = append(g.Unowned, p)
			}
		}
	}
	for i := len(h.trans) - 1; i >= 0; i-- {
		st.Transitions = append(st.Transitions, h.trans[i])
	}
	return st
}

// byPrefix reports whether name is under a WatchPrefix prefix.
func (h *Handler) byPrefix(name string) bool {
	for _, p := range h.cfg.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// holder is the JSON of a holder the backend reported. h.mu held.
func (h *Handler) holder(now time.Time, x session.Holder, mine string) Holder {
	hd := Holder{Name: x.Name, Token: tokenText(x.Token), Session: string(x.Session), Owner: owner(x.Owner),
		Mine: mine != "" && string(x.Session) == mine, RemainingMS: ms(x.Remaining)}
	if t := h.seen[x.Name]; t != nil && t.token == x.Token {
		hd.HeldSince, hd.HeldBeforePage = t.since.UTC(), t.beforePage
		if !t.sinceAfter.IsZero() {
			after := t.sinceAfter.UTC()
			hd.HeldSinceAfter = &after
		}
		if !t.renewedNoLater.IsZero() {
			ago := ms(now.Sub(t.renewedNoLater))
			hd.RenewedAgoMS = &ago
		}
	}
	return hd
}

// owner draws host, pid and version out of a session owner.
func owner(o session.Owner) Owner {
	out := Owner{Identity: o.Identity, Host: o.Metadata["host"], PID: o.Metadata["pid"], Version: o.Metadata["version"]}
	if len(o.Metadata) > 0 {
		out.Metadata = o.Metadata
	}
	if out.Host == "" && out.PID == "" {
		// The session's default identity is host/pid.
		if host, pid, ok := strings.Cut(o.Identity, "/"); ok && host != "" && isDigits(pid) {
			out.Host, out.PID = host, pid
		}
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// tokenText is a token as JSON carries it: a string, exact in every
// client (a JSON number is a float64 in JavaScript: above 2^53 it is
// rounded).
func tokenText(t uint64) string { return strconv.FormatUint(t, 10) }

// ms is a duration as the JSON carries it: whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

func (h *Handler) json(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(h.Status(r.Context()))
}

// ServeHTTP serves / (the page) and /status.json.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
