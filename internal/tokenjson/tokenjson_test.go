package tokenjson

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestUnmarshal(t *testing.T) {
	for in, want := range map[string]Token{
		`"7714429083785888759"`:  7714429083785888759,
		`7714429083785888761`:    7714429083785888761, // a number, as v0.1.0 wrote it, exactly
		`"18446744073709551615"`: 18446744073709551615,
		`"1"`:                    1,
	} {
		var got Token
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{`"18446744073709551616"`, `-1`, `"-1"`, `1.5`, `"0x10"`, `""`, `"12 "`, `true`} {
		var got Token
		if err := json.Unmarshal([]byte(in), &got); !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: got %d, %v; want ErrBadToken", in, got, err)
		}
	}
}
