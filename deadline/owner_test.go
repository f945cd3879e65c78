package deadline

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateOwner(t *testing.T) {
	ok := []struct {
		id string
		md map[string]string
	}{
		{"host-1/4242", nil},
		{"web-7", map[string]string{"addr": "10.0.0.7:8080", "zone": "eu-1"}},
		{strings.Repeat("x", MaxIdentityLen), nil},
	}
	for _, c := range ok {
		if err := ValidateOwner(c.id, c.md); err != nil {
			t.Errorf("ValidateOwner(%q, %v) = %v, want nil", c.id, c.md, err)
		}
	}
	bad := []struct {
		id   string
		md   map[string]string
		rule string
	}{
		{"", nil, "empty identity"},
		{strings.Repeat("x", MaxIdentityLen+1), nil, "longer than 128"},
		{"a\nb", nil, "control character"},
		{"\xff", nil, "UTF-8"},
		{"x", map[string]string{"bad key": "v"}, "metadata key"},
		{"x", map[string]string{"k": strings.Repeat("v", MaxMetadataValueLen+1)}, "longer than 256"},
		{"x", map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8", "i": "9"}, "more than 8"},
		{"x", map[string]string{"a": strings.Repeat("v", 250), "b": strings.Repeat("v", 250), "c": strings.Repeat("v", 250), "d": strings.Repeat("v", 250), "e": strings.Repeat("v", 250)}, "more than 1024"},
	}
	for _, c := range bad {
		err := ValidateOwner(c.id, c.md)
		if !errors.Is(err, ErrInvalidOwner) || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("ValidateOwner(%q, …) = %v, want ErrInvalidOwner naming %q", c.id, err, c.rule)
		}
	}
}

func FuzzValidateOwner(f *testing.F) {
	f.Add("host/1", "addr", "127.0.0.1:80")
	f.Fuzz(func(t *testing.T, id, k, v string) {
		if ValidateOwner(id, map[string]string{k: v}) != nil {
			return
		}
		if id == "" || len(id) > MaxIdentityLen || ValidateName(k) != nil || len(v) > MaxMetadataValueLen {
			t.Fatalf("accepted %q %q %q", id, k, v)
		}
	})
}
