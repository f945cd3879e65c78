package redissimba

import (
	"fmt"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// MaxNamespaceLen is the longest namespace [ValidateNamespace] accepts.
const MaxNamespaceLen = 64

// ErrInvalidNamespace is wrapped by the errors [ValidateNamespace] and
// [New] return for a bad namespace. errors.Is also matches such an error
// against [deadline.ErrInvalidName], as on every backend.
var ErrInvalidNamespace error = namespaceRule("redissimba: invalid namespace")

// namespaceRule is the type of this package's namespace sentinel: it has
// its own message, and errors.Is also matches it against
// [deadline.ErrInvalidName], the one sentinel every backend's namespace
// rule wraps (ADR 0061), so one check covers every backend.
type namespaceRule string

func (e namespaceRule) Error() string { return string(e) }

// Is reports whether target is [deadline.ErrInvalidName].
func (e namespaceRule) Is(target error) bool { return target == deadline.ErrInvalidName }

// ValidateNamespace reports whether ns is a valid namespace: 1 to 64
// characters of [A-Za-z0-9._-]. The rule keeps the namespace free of the
// characters that would change a key's meaning: braces (the Cluster hash
// tag), colons (the key separator) and spaces. The error wraps
// [ErrInvalidNamespace] and names the rule.
func ValidateNamespace(ns string) error {
	const rule = "want 1 to 64 characters of [A-Za-z0-9._-]"
	switch {
	case ns == "":
		return fmt.Errorf("%w: empty (%s)", ErrInvalidNamespace, rule)
	case len(ns) > MaxNamespaceLen:
		return fmt.Errorf("%w: %d bytes long (%s)", ErrInvalidNamespace, len(ns), rule)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has byte %q at offset %d (%s)", ErrInvalidNamespace, ns, c, i, rule)
		}
	}
	return nil
}

// keys builds the keys of one namespace. Every key starts with the same
// prefix, which holds the hash tag, so all of them map to one Cluster slot.
type keys struct {
	prefix  string // simba:{ns}:
	session string // simba:{ns}:s:
	lease   string // simba:{ns}:l:
	channel string // simba:{ns}:rel
	names   string // simba:{ns}:names
	epoch   string // simba:{ns}:epoch
	lineage string // simba:{ns}:lineage
	hw      string // simba:{ns}:hw
}

func newKeys(ns string) keys {
	p := "simba:{" + ns + "}:"
	return keys{prefix: p, session: p + "s:", lease: p + "l:", channel: p + "rel", names: p + "names", epoch: p + "epoch", lineage: p + "lineage", hw: p + "hw"}
}

// idLen is the length of a session id: 128 bits in lower-case hex.
const idLen = 32

// validID reports whether id has the form this backend hands out. Any
// other id never existed here, so it is answered as expired and never
// reaches a key.
func validID(id driver.ID) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
