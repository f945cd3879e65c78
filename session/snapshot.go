package session

import (
	"encoding/json"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/tokenjson"
)

// Duration is a time.Duration that encodes as text ("1.5s") in JSON.
type Duration time.Duration

// MarshalText encodes the duration like time.Duration.String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText decodes a duration written by MarshalText.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Snapshot is the state of a session at one moment, serialisable as JSON.
type Snapshot struct {
	ID         ID       `json:"id"`
	State      State    `json:"state"`
	InState    Duration `json:"in_state"`    // time since State last changed
	Remaining  Duration `json:"remaining"`   // until the local deadline
	RenewEvery Duration `json:"renew_every"` // the renewal period in force
	Entries    []Entry  `json:"entries"`
}

// Entry is one lease, election, lock or group registered on the session.
type Entry struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`                   // "election", "lock", ... or "claim"
	Status    string   `json:"status,omitempty"`       // e.g. an election's LEADER
	Token     uint64   `json:"token,omitempty,string"` // the current term's, if one is held; a string in JSON (ADR 0196)
	Valid     bool     `json:"valid"`                  // a valid term is held
	Remaining Duration `json:"remaining,omitempty"`
}

// UnmarshalJSON reads the token as a string or, as v0.1.0 wrote it, a
// number.
func (e *Entry) UnmarshalJSON(b []byte) error {
	type plain Entry
	w := struct {
		*plain
		Token tokenjson.Token `json:"token"`
	}{plain: (*plain)(e), Token: tokenjson.Token(e.Token)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Token = uint64(w.Token)
	return nil
}

// Snapshot returns the session's state and one entry per registered claim.
func (s *Session) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{State: s.state, InState: Duration(s.env.Now().Sub(s.since)), RenewEvery: Duration(s.renewEvery), Entries: make([]Entry, 0, len(s.order))}
	if s.inc != nil {
		snap.ID = s.inc.id
		snap.Remaining = Duration(s.inc.life.Remaining())
	}
	for _, c := range s.order {
		if c.dropped {
			continue
		}
		e := Entry{Name: c.name, Kind: "claim"}
		if d, ok := c.h.(layer.Describer); ok {
			e.Kind, e.Status = d.Describe()
		}
		if h := c.held; h != nil {
			e.Token = h.token
			e.Remaining = Duration(h.t.Remaining())
			e.Valid = e.Remaining > 0
		}
		snap.Entries = append(snap.Entries, e)
	}
	return snap
}
