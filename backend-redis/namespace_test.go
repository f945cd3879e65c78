package redissimba_test

import (
	"errors"
	"strings"
	"testing"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
)

// TestNamespaceRule checks the rule every backend shares (ADR 0061): a bad
// namespace is refused with an error matching deadline.ErrInvalidName, and
// an error of another kind does not match it.
func TestNamespaceRule(t *testing.T) {
	c := standalone(t)
	for _, ns := range []string{"", "a{b}", "a:b", "a b", strings.Repeat("n", redissimba.MaxNamespaceLen+1)} {
		_, err := redissimba.New(c, ns)
		if !errors.Is(err, deadline.ErrInvalidName) || !errors.Is(err, redissimba.ErrInvalidNamespace) {
			t.Errorf("New(%q) = %v, want ErrInvalidName and ErrInvalidNamespace", ns, err)
		}
	}
	if _, err := redissimba.New(nil, "ns"); errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("New(nil client) = %v, matches ErrInvalidName", err)
	}
}
