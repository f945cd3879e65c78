package zksimba_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// wantOverlap checks that Open and Init on root are refused as
// overlapping, naming the node in the way.
func wantOverlap(t *testing.T, srv []string, root, naming string) {
	t.Helper()
	b := newBackendNoInit(t, srv, root)
	if err := b.Init(ctxT(t, 10*time.Second)); !errors.Is(err, zksimba.ErrOverlappingNamespace) || !strings.Contains(err.Error(), naming) {
		t.Fatalf("Init(%s) = %v, want ErrOverlappingNamespace naming %s", root, err, naming)
	}
	_, err := b.Open(ctxT(t, 10*time.Second), driver.OpenRequest{LeaseDuration: 2 * time.Second})
	if !errors.Is(err, zksimba.ErrOverlappingNamespace) || !strings.Contains(err.Error(), naming) {
		t.Fatalf("Open(%s) = %v, want ErrOverlappingNamespace naming %s", root, err, naming)
	}
}

// Issue 21.4: namespaces /x/app and /x/app/jobs. The inner one's root is a
// persistent node where the outer one keeps its lease "jobs": the outer
// namespace's Acquire("jobs") got token 0, no error, forever. Overlapping
// namespaces are refused whichever is made first.
func TestNestedNamespacesRefused(t *testing.T) {
	srv := standalone(t)

	t.Run("inner after outer", func(t *testing.T) {
		outer := newRoot(t)
		b := newBackend(t, srv, outer)
		open(t, b, 2*time.Second)
		wantOverlap(t, srv, outer+"/jobs", outer+"/@epoch")
		wantOverlap(t, srv, outer+"/jobs/deeper", outer+"/@epoch")
		if ok, _, err := rawConn(t, srv).Exists(outer + "/jobs"); err != nil || ok {
			t.Fatalf("refused inner namespace left its root behind: %v, %v", ok, err)
		}
	})

	t.Run("outer after inner", func(t *testing.T) {
		outer := newRoot(t)
		open(t, newBackend(t, srv, outer+"/jobs"), 2*time.Second)
		wantOverlap(t, srv, outer, outer+"/jobs")
		deep := newRoot(t)
		open(t, newBackend(t, srv, deep+"/a/b"), 2*time.Second)
		wantOverlap(t, srv, deep, deep+"/a")
		// Nothing was written into the refused root.
		data, _, err := rawConn(t, srv).Get(outer)
		must(t, err)
		if len(data) != 0 {
			t.Fatalf("refused root %s got data %q", outer, data)
		}
	})

	t.Run("an application's node", func(t *testing.T) {
		root := newRoot(t)
		raw := rawConn(t, srv)
		must(t, createParents(raw, root))
		if _, err := raw.Create(root, []byte("the application's own"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		wantOverlap(t, srv, root, "no Simba epoch record")
		data, _, err := raw.Get(root)
		must(t, err)
		if string(data) != "the application's own" {
			t.Fatalf("the application's node was overwritten: %q", data)
		}
	})
}

// A persistent node under a namespace root (an overlap made before this
// check, by two creators at once, or an application's node) is not a
// lease: acquiring its name is an error naming it, at every attempt,
// never token 0 as if someone held it.
func TestPersistentNodeIsNotALease(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	b := newBackend(t, srv, root)
	s := open(t, b, 2*time.Second)
	raw := rawConn(t, srv)
	if _, err := raw.Create(root+"/jobs", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for attempt := range 3 {
		r := acquire(t, b, s.ID, "jobs", "free")
		if !errors.Is(r[0].Err, zksimba.ErrNotALease) || !strings.Contains(r[0].Err.Error(), root+"/jobs") || r[0].Token != 0 {
			t.Fatalf("attempt %d: Acquire(jobs) = token %d, err %v; want ErrNotALease naming %s/jobs", attempt, r[0].Token, r[0].Err, root)
		}
		if r[1].Err != nil || r[1].Token == 0 {
			t.Fatalf("attempt %d: Acquire(free) beside it = token %d, err %v", attempt, r[1].Token, r[1].Err)
		}
	}
	// Once the node is gone the name is a lease like any other.
	must(t, raw.Delete(root+"/jobs", -1))
	waitUntil(t, 5*time.Second, "jobs granted after the persistent node went", func() bool {
		r := acquire(t, b, s.ID, "jobs")
		return r[0].Err == nil && r[0].Token != 0
	})
}

// createParents creates every ancestor of path that is missing.
func createParents(conn *zk.Conn, path string) error {
	for i := 1; i < len(path); i++ {
		if path[i] != '/' {
			continue
		}
		if _, err := conn.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}
