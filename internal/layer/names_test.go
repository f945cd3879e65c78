package layer

import "testing"

// The forms a session reserves for groups (ADR 0191): exactly the names a
// group makes, nothing else under its prefix.
func TestIsGroupLease(t *testing.T) {
	for name, want := range map[string]bool{
		"orders:m:a":         true,
		"orders:m:a.12":      true,
		"orders:m:a.65536":   true,
		"orders:p:0":         true,
		"orders:p:65535":     true,
		"orders.eu:p:3":      true,
		"orders:m:a.0":       false,
		"orders:m:a.65537":   false,
		"orders:m:a.012":     false,
		"orders:m:a b":       false,
		"orders:p:65536":     false,
		"orders:p:03":        false,
		"orders:p:x":         false,
		"orders:p:-1":        false,
		"a:b:p:3":            false,
		":p:3":               false,
		"orders:members":     false,
		"orders":             false,
		"orders:m:" + long(): false,
	} {
		if got := IsGroupLease(name); got != want {
			t.Errorf("IsGroupLease(%q) = %v, want %v", name, got, want)
		}
	}
}

func long() string {
	b := make([]byte, MaxMemberIDLen+1)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
