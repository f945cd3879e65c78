// Package tokenjson reads fencing tokens from JSON. Simba writes a token
// as a string ("7714429083785888759"): a JSON number above 2^53 loses
// digits in a browser, and a fencing token read wrong is worse than none
// (docs/adr/0196-tokens-are-strings-in-json.md). Reading, it accepts the
// string and also the number that Simba v0.1.0 wrote, so that a new
// reader understands an older writer during a rolling deploy.
package tokenjson

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// ErrBadToken is wrapped by the error for a token that is neither a
// decimal string nor a number in the uint64 range.
var ErrBadToken = errors.New("simba: a fencing token in JSON must be a decimal string (or, as v0.1.0 wrote it, a number) in the uint64 range")

// Token is a uint64 that decodes from a JSON string or number. A struct
// shadows its uint64 token field with one of these in its UnmarshalJSON.
type Token uint64

// UnmarshalJSON accepts "123" and 123; null leaves the token unchanged,
// as encoding/json does for a uint64.
func (t *Token) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s := b
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: got %s", ErrBadToken, b)
	}
	*t = Token(v)
	return nil
}
