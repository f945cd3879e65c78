package session_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
)

// big is a token a JSON number cannot carry through a browser: above 2^53
// a float64 rounds it (to 7714429083785888768 here).
const big uint64 = 7714429083785888759

// TestTokensAreStringsInJSON: every token Simba writes in JSON is a
// string, read back exactly; a number (as v0.1.0 wrote it) is still read
// exactly (ADR 0196, issue 22).
func TestTokensAreStringsInJSON(t *testing.T) {
	const want = `"token":"7714429083785888759"`
	cases := []struct {
		name string
		v    any
		back func([]byte) (uint64, error)
	}{
		{"Holder", session.Holder{Name: "a", Token: big}, func(b []byte) (uint64, error) {
			var h session.Holder
			err := json.Unmarshal(b, &h)
			return h.Token, err
		}},
		{"Lease", driver.Lease{Name: "a", Token: big}, func(b []byte) (uint64, error) {
			var l driver.Lease
			err := json.Unmarshal(b, &l)
			return l.Token, err
		}},
		{"Snapshot", session.Snapshot{State: session.Live, Entries: []session.Entry{{Name: "a", Token: big, Valid: true}}}, func(b []byte) (uint64, error) {
			var s session.Snapshot
			err := json.Unmarshal(b, &s)
			if len(s.Entries) != 1 {
				return 0, err
			}
			return s.Entries[0].Token, err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), want) {
				t.Fatalf("%s in JSON: %s, want %s", c.name, b, want)
			}
			if got, err := c.back(b); err != nil || got != big {
				t.Fatalf("read back %s: token %d, %v; want %d", b, got, err, big)
			}
			old := bytes.Replace(b, []byte(`"7714429083785888759"`), []byte(`7714429083785888759`), 1)
			if got, err := c.back(old); err != nil || got != big {
				t.Fatalf("read %s (a number, as v0.1.0 wrote it): token %d, %v; want %d", old, got, err, big)
			}
			bad := bytes.Replace(b, []byte(`"7714429083785888759"`), []byte(`"77x"`), 1)
			if _, err := c.back(bad); err == nil || !strings.Contains(err.Error(), "fencing token") {
				t.Fatalf("read %s: %v, want an error naming the fencing token", bad, err)
			}
		})
	}
	// Other fields still decode around the shadowed token.
	var h session.Holder
	if err := json.Unmarshal([]byte(`{"name":"n","token":"5","session":"s1","owner":{"identity":"me"},"remaining":7}`), &h); err != nil ||
		h.Name != "n" || h.Token != 5 || h.Session != "s1" || h.Owner.Identity != "me" || h.Remaining != 7 {
		t.Fatalf("Holder decoded as %+v, %v", h, err)
	}
	// An entry with no term keeps omitting its token.
	if b, _ := json.Marshal(session.Entry{Name: "a"}); strings.Contains(string(b), "token") {
		t.Fatalf("an entry with no term: %s, want no token", b)
	}
	// Events, as JSON and as LogEvents writes them through a JSON handler.
	if b, _ := json.Marshal(session.Event{Kind: session.TermElected, Name: "a", Token: big}); !strings.Contains(string(b), `"Token":"7714429083785888759"`) {
		t.Fatalf("Event in JSON: %s", b)
	}
	var logged bytes.Buffer
	session.LogEvents(slog.New(slog.NewJSONHandler(&logged, nil)))(session.Event{Kind: session.TermElected, Name: "a", Token: big, ClaimKind: "election"})
	if !strings.Contains(logged.String(), want) {
		t.Fatalf("LogEvents through a JSON handler: %s, want %s", logged.String(), want)
	}
}
