package session

import "container/list"

// retainNames is how many names without a claim keep their entries in
// Session.tokens and incarnation.released (ADR 0295). A lock per entity
// ("lock:order:<id>", each used once) through one long-lived Session would
// otherwise leave about 150 bytes per name ever locked in the process,
// forever (issue 23). 1024 names cost about 200 KB.
const retainNames = 1024

// forgetting bounds the engine's per-name token memory. A name's entries
// are kept while a claim of it is registered, while a release of it is
// queued or in flight, and while it is among the last retainNames names
// retired (a claim dropped, a release answered with no claim of the name
// registered); the least recently retired is then forgotten. Lock held
// for every method.
type forgetting struct {
	order   list.List                // retired names, least recently retired first
	at      map[string]*list.Element // name -> its element in order
	pending map[string]int           // releases of a name queued or in flight
}

// releaseQueued counts a release of name queued. Lock held.
func (s *Session) releaseQueued(name string) {
	if s.retiring.pending == nil {
		s.retiring.pending = make(map[string]int)
	}
	s.retiring.pending[name]++
}

// releaseDone counts a release of name answered (or its call over), and
// retires the name if nothing else keeps it. Lock held.
func (s *Session) releaseDone(name string) {
	f := &s.retiring
	if n := f.pending[name] - 1; n > 0 {
		f.pending[name] = n
		return
	}
	delete(f.pending, name)
	if s.claims[name] == nil {
		s.retire(name)
	}
}

// retire makes name the most recently retired, and forgets the least
// recently retired beyond retainNames, unless a claim of it was
// registered again or a release of it is on its way (the claim's drop or
// the release's answer retires it again). Lock held.
func (s *Session) retire(name string) {
	f := &s.retiring
	if f.at == nil {
		f.at = make(map[string]*list.Element)
	}
	if e := f.at[name]; e != nil {
		f.order.MoveToBack(e)
		return
	}
	f.at[name] = f.order.PushBack(name)
	for f.order.Len() > retainNames {
		old := f.order.Remove(f.order.Front()).(string)
		delete(f.at, old)
		if s.claims[old] != nil || f.pending[old] > 0 {
			continue
		}
		delete(s.tokens, old)
		if s.inc != nil {
			delete(s.inc.released, old)
		}
	}
}
