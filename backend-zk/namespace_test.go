package zksimba_test

import (
	"errors"
	"testing"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
)

// TestNamespaceRule checks the rule every backend shares (ADR 0061): a bad
// namespace is refused with an error matching deadline.ErrInvalidName, and
// an error of another kind does not match it.
func TestNamespaceRule(t *testing.T) {
	for _, root := range []string{"", "a", "/", "/a/", "/a b", "/zookeeper/x"} {
		_, err := zksimba.New([]string{"127.0.0.1:1"}, root)
		if !errors.Is(err, deadline.ErrInvalidName) || !errors.Is(err, zksimba.ErrInvalidRoot) {
			t.Errorf("New(%q) = %v, want ErrInvalidName and ErrInvalidRoot", root, err)
		}
	}
	if _, err := zksimba.New(nil, "/a"); errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("New(no servers) = %v, matches ErrInvalidName", err)
	}
}
