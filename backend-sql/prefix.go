package sqlbackend

import (
	"errors"
	"fmt"

	"github.com/simba-go/simba/deadline"
)

// DefaultPrefix is the table prefix used when none is given.
const DefaultPrefix = "simba"

// MaxPrefixLen is the longest table prefix. The longest name built from it
// ("<prefix>_acquire_v1", "<prefix>_leases_session_idx") then stays within
// the identifier limits of PostgreSQL (63 bytes) and MySQL (64).
const MaxPrefixLen = 32

// ErrInvalidPrefix is wrapped by every error [ValidatePrefix] returns.
// errors.Is also matches such an error against [deadline.ErrInvalidName],
// as on every backend.
var ErrInvalidPrefix error = namespaceRule("simba: invalid table prefix")

// namespaceRule is the type of this package's namespace sentinel: it has
// its own message, and errors.Is also matches it against
// [deadline.ErrInvalidName], the one sentinel every backend's namespace
// rule wraps (ADR 0061), so one check covers every backend.
type namespaceRule string

func (e namespaceRule) Error() string { return string(e) }

// Is reports whether target is [deadline.ErrInvalidName].
func (e namespaceRule) Is(target error) bool { return target == deadline.ErrInvalidName }

// ValidatePrefix reports whether prefix is a valid table prefix: 1 to 32
// characters of [a-z0-9_], starting with a letter. Lower case only, so the
// name means the same table on PostgreSQL (which folds unquoted names) and
// on MySQL (whose table names may be case-sensitive files). The error wraps
// [ErrInvalidPrefix] and names the rule.
func ValidatePrefix(prefix string) error {
	const rule = "want 1 to 32 characters of [a-z0-9_] starting with a letter"
	switch {
	case prefix == "":
		return fmt.Errorf("%w: empty (%s)", ErrInvalidPrefix, rule)
	case len(prefix) > MaxPrefixLen:
		return fmt.Errorf("%w: %d bytes long, longer than %d (%s)", ErrInvalidPrefix, len(prefix), MaxPrefixLen, rule)
	case prefix[0] < 'a' || prefix[0] > 'z':
		return fmt.Errorf("%w: %q starts with %q (%s)", ErrInvalidPrefix, prefix, prefix[0], rule)
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return fmt.Errorf("%w: %q has byte %q at offset %d (%s)", ErrInvalidPrefix, prefix, c, i, rule)
		}
	}
	return nil
}

// ErrSchemaVersion is wrapped by the error a backend returns when the
// namespace's installed schema is not one this code can use: older than it
// needs (run the migration the message names) or newer and incompatible
// (upgrade the library). The message names both versions.
var ErrSchemaVersion = errors.New("simba: schema version mismatch")

// ErrUnknownNamespace is wrapped by the error a backend opened on an
// existing namespace only (pgsimba.OpenExisting, mysqlsimba.OpenExisting)
// returns when nothing of the namespace is installed: a mistyped name reads
// as an error naming it, and nothing is created.
var ErrUnknownNamespace = errors.New("simba: no such namespace")

// ErrForeignTable is wrapped by the error a backend returns, before it
// creates or changes anything, when a table or routine of the namespace's
// names exists but is not one Simba created (another shape: an
// application's own table). Simba never alters or writes what it did not
// create. The message names the object and what differs.
var ErrForeignTable = errors.New("simba: a table of the namespace's names is not Simba's")

// ErrSchemaConflict is wrapped by the error pgsimba returns when the
// namespace's tables are in another schema than the one WithSchema names,
// or in more than one schema: one prefix on one database is one namespace,
// whatever a pool's search_path (ADR 0170).
var ErrSchemaConflict = errors.New("simba: one prefix on one database is one namespace")

// ErrReadOnly is wrapped by the error a backend returns at start when the
// connections' transactions are read-only (a standby, a read-only default):
// every call of a session writes. A backend opened with OpenExisting only
// reads, and accepts them.
var ErrReadOnly = errors.New("simba: read-only connection")

// ErrSessionSetting is wrapped by the error a backend returns at start when
// its connections run with a session setting under which its calls cannot
// work (MySQL/MariaDB autocommit off: every statement would leave a
// transaction open on the pool's connection). The message names the
// setting and what to use instead.
var ErrSessionSetting = errors.New("simba: a session setting Simba cannot work under")
