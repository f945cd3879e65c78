package deadline

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	valid := []string{"a", "jobs", "orders:eu-1", "A.b_c-d:9", "...", ".a", strings.Repeat("x", 128)}
	for _, n := range valid {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	invalid := map[string]string{
		"":                       "empty",
		".":                      "reserved",
		"..":                     "reserved",
		strings.Repeat("x", 129): "longer than 128",
		"a/b":                    "offset 1",
		"a b":                    "offset 1",
		"ä":                      "offset 0",
		"a\x00":                  "offset 1",
		"{tag}":                  "offset 0",
		"a*":                     "offset 1",
	}
	for n, rule := range invalid {
		err := ValidateName(n)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), rule) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName mentioning %q", n, err, rule)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", ".", "..", "a/b", "jobs:1", strings.Repeat("z", 129), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		ok := len(s) >= 1 && len(s) <= 128 && s != "." && s != ".."
		for _, r := range []byte(s) {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-", rune(r)) {
				ok = false
			}
		}
		if ok != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v, but the rule says valid=%v", s, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Fatalf("ValidateName(%q) = %v, not an ErrInvalidName", s, err)
		}
		if err == nil && (strings.ContainsAny(s, "/{}* \x00") || s == "..") {
			t.Fatalf("ValidateName accepted %q, unsafe as a key or path", s)
		}
	})
}
