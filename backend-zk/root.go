package zksimba

import (
	"fmt"
	"strings"

	"github.com/simba-go/simba/deadline"
)

// MaxRootLen is the longest namespace root path accepted by [ValidateRoot].
const MaxRootLen = 512

// ErrInvalidRoot is wrapped by every error [ValidateRoot] returns.
// errors.Is also matches such an error against [deadline.ErrInvalidName],
// as on every backend.
var ErrInvalidRoot error = namespaceRule("zksimba: invalid namespace root")

// namespaceRule is the type of this package's namespace sentinel: it has
// its own message, and errors.Is also matches it against
// [deadline.ErrInvalidName], the one sentinel every backend's namespace
// rule wraps (ADR 0061), so one check covers every backend.
type namespaceRule string

func (e namespaceRule) Error() string { return string(e) }

// Is reports whether target is [deadline.ErrInvalidName].
func (e namespaceRule) Is(target error) bool { return target == deadline.ErrInvalidName }

// ValidateRoot reports whether root is a valid namespace root: an absolute
// ZooKeeper path of 1 to 16 elements, at most 512 bytes, each element 1 to
// 128 characters of [A-Za-z0-9._:-] and not "." or "..", with no trailing
// slash, whose first element is not "zookeeper" (the server's own subtree).
// Lease nodes are created directly under it, so the same rule that keeps
// lease names safe (deadline.ValidateName) keeps the whole path safe. The
// error wraps [ErrInvalidRoot] and names the rule that failed.
func ValidateRoot(root string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: "+format, append([]any{ErrInvalidRoot, root}, args...)...)
	}
	switch {
	case root == "" || root[0] != '/':
		return bad("must start with '/' (an absolute path such as /simba/myapp)")
	case root == "/":
		return bad("must not be / itself (pick a subtree such as /simba/myapp)")
	case len(root) > MaxRootLen:
		return bad("%d bytes long, longer than %d", len(root), MaxRootLen)
	}
	elems := strings.Split(root[1:], "/")
	if len(elems) > 16 {
		return bad("%d path elements, more than 16", len(elems))
	}
	for i, e := range elems {
		switch {
		case e == "":
			return bad("empty path element %d (no '//' and no trailing '/')", i+1)
		case len(e) > 128:
			return bad("path element %d is %d bytes long, longer than 128", i+1, len(e))
		case e == "." || e == "..":
			return bad("path element %q is reserved", e)
		case i == 0 && e == "zookeeper":
			return bad("/zookeeper is the server's own subtree")
		}
		for j := 0; j < len(e); j++ {
			if !elemByte(e[j]) {
				return bad("path element %d has byte %q at offset %d (want [A-Za-z0-9._:-])", i+1, e[j], j)
			}
		}
	}
	return nil
}

func elemByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '-'
}

// parents lists root and every ancestor below "/", outermost first:
// "/a/b" gives ["/a", "/a/b"]. root must be valid.
func parents(root string) []string {
	var out []string
	for i := 1; i < len(root); i++ {
		if root[i] == '/' {
			out = append(out, root[:i])
		}
	}
	return append(out, root)
}
