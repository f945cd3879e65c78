package deadline

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Bounds of an owner's identity and metadata, so that every backend can
// store them with a session without growing its records without limit.
const (
	MaxIdentityLen      = 128
	MaxMetadataEntries  = 8
	MaxMetadataValueLen = 256
	MaxMetadataBytes    = 1024
)

// ErrInvalidOwner is wrapped by every error [ValidateOwner] returns.
var ErrInvalidOwner = errors.New("simba: invalid owner")

// ValidateOwner reports whether an identity and its metadata may be stored
// with a session: the identity is 1 to 128 bytes of printable UTF-8; there
// are at most 8 metadata entries, each key a valid lease name (see
// [ValidateName]) and each value at most 256 bytes of printable UTF-8, 1 KiB
// in all. The error wraps [ErrInvalidOwner] and names the rule.
func ValidateOwner(identity string, metadata map[string]string) error {
	if identity == "" {
		return fmt.Errorf("%w: empty identity", ErrInvalidOwner)
	}
	if len(identity) > MaxIdentityLen {
		return fmt.Errorf("%w: identity is %d bytes, longer than %d", ErrInvalidOwner, len(identity), MaxIdentityLen)
	}
	if err := printable(identity); err != nil {
		return fmt.Errorf("%w: identity %w", ErrInvalidOwner, err)
	}
	if len(metadata) > MaxMetadataEntries {
		return fmt.Errorf("%w: %d metadata entries, more than %d", ErrInvalidOwner, len(metadata), MaxMetadataEntries)
	}
	total := 0
	for k, v := range metadata {
		if err := ValidateName(k); err != nil {
			return fmt.Errorf("%w: metadata key: %w", ErrInvalidOwner, err)
		}
		if len(v) > MaxMetadataValueLen {
			return fmt.Errorf("%w: metadata %q is %d bytes, longer than %d", ErrInvalidOwner, k, len(v), MaxMetadataValueLen)
		}
		if err := printable(v); err != nil {
			return fmt.Errorf("%w: metadata %q %w", ErrInvalidOwner, k, err)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata is %d bytes, more than %d", ErrInvalidOwner, total, MaxMetadataBytes)
	}
	return nil
}

func printable(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("has control character %U at offset %d", r, i)
		}
	}
	return nil
}
