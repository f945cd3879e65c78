package session

// RetainNames is retainNames, for the tests of ADR 0295.
const RetainNames = retainNames

// TokenEntries reports how many names s keeps token entries for: in
// Session.tokens, and in its current incarnation's released (tests only:
// the engine's per-name memory, ADR 0295).
func TokenEntries(s *Session) (tokens, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inc != nil {
		released = len(s.inc.released)
	}
	return len(s.tokens), released
}

// HasTokenEntry reports whether s keeps name's entry in Session.tokens.
func HasTokenEntry(s *Session, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tokens[name]
	return ok
}
