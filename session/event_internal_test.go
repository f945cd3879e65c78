package session

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A lock's terms come once per acquisition: at Info a lock-heavy service
// would log two lines per lock. Elections' terms and the session's life
// stay at Info.
func TestLogEventsLogsLockTermsAtDebugAndElectionTermsAtInfo(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log := LogEvents(l)
	log(Event{Kind: TermElected, Name: "nightly", Token: 7, ClaimKind: "lock"})
	log(Event{Kind: TermRevoked, Name: "nightly", Token: 7, ClaimKind: "lock", Reason: 1})
	log(Event{Kind: TermElected, Name: "billing", Token: 8, ClaimKind: "election"})
	log(Event{Kind: SessionOpened})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"level=DEBUG", "level=DEBUG", "level=INFO", "level=INFO"}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %q, want %s", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], "kind=lock") {
		t.Errorf("a term's line does not say what it belongs to: %q", lines[0])
	}
}

// emit builds nothing (no event, no deferred delivery) when no listener
// would receive it and the log would drop it: the common case of a lock
// acquired on a session logging at Info.
func TestEmitBuildsNothingNobodyWouldSee(t *testing.T) {
	info := slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := &Session{log: info, env: SystemEnv()}
	s.emit(Event{Kind: TermElected, Name: "nightly", ClaimKind: "lock"})
	if len(s.effects) != 0 {
		t.Fatalf("a lock's term (Debug) was queued for a log at Info: %d effects", len(s.effects))
	}
	s.emit(Event{Kind: TermElected, Name: "billing", ClaimKind: "election"})
	if len(s.effects) != 1 {
		t.Fatalf("an election's term (Info) queued %d effects for a log at Info, want 1", len(s.effects))
	}
	s.effects, s.log = nil, nil
	s.emit(Event{Kind: SessionOpened})
	if len(s.effects) != 0 {
		t.Fatalf("an event was queued with the log off and no listener: %d effects", len(s.effects))
	}
	var got []Event
	s.listeners = []Listener{func(e Event) { got = append(got, e) }}
	s.emit(Event{Kind: TermElected, Name: "nightly", ClaimKind: "lock"})
	for _, f := range s.effects {
		f()
	}
	if len(got) != 1 || got[0].Name != "nightly" {
		t.Fatalf("a listener did not receive a lock's term: %v", got)
	}
}
