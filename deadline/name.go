package deadline

import (
	"errors"
	"fmt"
)

// MaxNameLen is the longest lease name.
const MaxNameLen = 128

// ErrInvalidName is wrapped by every error [ValidateName] returns.
var ErrInvalidName = errors.New("simba: invalid lease name")

// ValidateName reports whether name is a valid lease name: 1 to 128
// characters of [A-Za-z0-9._:-], and not "." or "..". Such a name is safe as
// a Redis key part, a ZooKeeper path element and a SQL value on every
// backend. The error wraps [ErrInvalidName] and names the rule.
func ValidateName(name string) error {
	switch {
	case len(name) == 0:
		return fmt.Errorf("%w: empty (want 1 to %d characters of [A-Za-z0-9._:-])", ErrInvalidName, MaxNameLen)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes long, longer than %d", ErrInvalidName, len(name), MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is reserved", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: %q has byte %q at offset %d (want [A-Za-z0-9._:-])", ErrInvalidName, name, name[i], i)
		}
	}
	return nil
}

func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '-'
}
