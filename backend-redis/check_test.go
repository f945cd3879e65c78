package redissimba

import (
	"errors"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"7.0.15": true, "5.0.0": true, "10.2.1": true,
		"4.0.14": false, "3.2": false, "": false, "x.y": false, "-5.0": false,
	} {
		err := checkVersion(v)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrServerUnsupported)) {
			t.Errorf("checkVersion(%q) = %v, want ok %v (errors wrap ErrServerUnsupported)", v, err, ok)
		}
	}
}

func FuzzCheckVersion(f *testing.F) {
	f.Add("7.0.15")
	f.Add("4.0")
	f.Fuzz(func(t *testing.T, v string) {
		if err := checkVersion(v); err != nil && !errors.Is(err, ErrServerUnsupported) {
			t.Fatalf("checkVersion(%q) = %v, not wrapping ErrServerUnsupported", v, err)
		}
	})
}
