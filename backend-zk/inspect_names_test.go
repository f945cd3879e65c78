package zksimba_test

import (
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// An Inspect by names lists nothing, so nothing sweeps the cache first
// (the listing's sweep, dd549d7): a released node's entry, whose watch
// fired, must not be reported from the cache. Without it the mutation
// zk-inspect-cached-node-outlives-watch survived: the prefix Inspects of
// TestInspectReadsOnlyWhatChanged list the root again after a release,
// and that sweep dropped the entry before the check it removes was reached.
func TestInspectByNameAfterARelease(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 10*time.Second)
	res := acquire(t, a, sa.ID, "n:1")
	rc := &readCounter{}
	c := newBackendNoInit(t, srv, root, zksimba.WithDialer(rc.dial))
	byName := driver.InspectRequest{Names: []string{"n:1"}}
	if hs, _ := inspectBoth(t, c, rc, srv, root, byName); len(hs) != 1 || hs[0].Session != sa.ID {
		t.Fatalf("Inspect of a held name: %+v, want n:1 held by %s", hs, sa.ID)
	}
	if err := a.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "n:1", Token: res[0].Token}}}); err != nil {
		t.Fatal(err)
	}
	if hs, _ := inspectBoth(t, c, rc, srv, root, byName); len(hs) != 0 {
		t.Fatalf("Inspect by name after the release: %+v, want nothing held", hs)
	}
}
