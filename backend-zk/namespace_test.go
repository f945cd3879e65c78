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

// A ZooKeeper connect string's chroot suffix ("zk1:2181/app", as Java
// clients take it) is no address: go-zookeeper would dial "2181/app" as a
// port forever and Open would wait for its context. New says so at once.
func TestNewRefusesAServerWithAChroot(t *testing.T) {
	for _, srv := range [][]string{{"127.0.0.1:2181/chroot"}, {"zk1:2181", "zk2:2181/kafka"}, {"zk1:port"}, {"zk1:2181:1"}} {
		_, err := zksimba.New(srv, "/simba/app")
		if !errors.Is(err, zksimba.ErrInvalidOption) {
			t.Fatalf("New(%q): %v, want ErrInvalidOption", srv, err)
		}
		t.Logf("New(%q): %v", srv, err)
	}
	for _, srv := range [][]string{{"zk1"}, {"zk1:2181", "[::1]:2181"}, {"127.0.0.1:2181"}} {
		if _, err := zksimba.New(srv, "/simba/app"); err != nil {
			t.Fatalf("New(%q): %v", srv, err)
		}
	}
}
