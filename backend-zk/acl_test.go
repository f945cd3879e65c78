package zksimba_test

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// With digest auth, the namespace and lease nodes carry a digest ACL: a
// client without the credentials can neither take, forge nor delete a
// lease; one with them competes normally.
func TestDigestACL(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	auth := zksimba.WithDigestAuth("simba", "s3cret")
	a := newBackend(t, srv, root, auth)
	sa := open(t, a, 4*time.Second)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	if tok == 0 {
		t.Fatal("authenticated client could not acquire a free name")
	}

	raw := rawConn(t, srv)
	if _, _, err := raw.GetACL(root); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated GetACL = %v, want ErrNoAuth", err)
	}
	admin := rawConn(t, srv)
	if err := admin.AddAuth("digest", []byte("simba:s3cret")); err != nil {
		t.Fatal(err)
	}
	acl, _, err := admin.GetACL(root)
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || acl[0] != zk.DigestACL(zk.PermAll, "simba", "s3cret")[0] {
		t.Fatalf("root ACL = %v, %v; want the digest ACL of simba", acl, err)
	}
	if acl, _, err := admin.GetACL(root + "/x"); err != nil || len(acl) != 1 || acl[0].Scheme != "digest" {
		t.Fatalf("lease node ACL = %v, %v; want digest", acl, err)
	}
	if err := raw.Delete(root+"/x", -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated delete of a lease = %v, want ErrNoAuth", err)
	}
	if _, err := raw.Create(root+"/y", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated create of a lease = %v, want ErrNoAuth", err)
	}

	for _, tc := range []struct {
		name string
		opts []zksimba.Option
	}{
		{"no credentials", nil},
		{"wrong password", []zksimba.Option{zksimba.WithDigestAuth("simba", "wrong")}},
	} {
		// Refused at Open, as a permanent error (it used to pass Open and
		// fail every later call with a raw "not authenticated").
		t.Run(tc.name, func(t *testing.T) {
			b := newBackendNoInit(t, srv, root, tc.opts...)
			_, err := b.Open(ctxT(t, 5*time.Second), driver.OpenRequest{LeaseDuration: 4 * time.Second})
			if !errors.Is(err, zksimba.ErrNotAuthorized) || !errors.Is(err, zk.ErrNoAuth) {
				t.Fatalf("Open without the right credentials = %v, want ErrNotAuthorized wrapping ErrNoAuth", err)
			}
		})
	}

	c := newBackend(t, srv, root, auth)
	sc := open(t, c, 4*time.Second)
	if got := acquire(t, c, sc.ID, "x")[0].Token; got != 0 {
		t.Fatalf("second authenticated client took a held lease: %d", got)
	}
	if got := acquire(t, c, sc.ID, "y")[0].Token; got <= tok {
		t.Fatalf("authenticated client's token %d, want > %d", got, tok)
	}
}

// A lease node deleted behind the backend's back (by an operator) leaves
// the owned set, so the next renewal no longer lists it and the engine
// ends the term with TAKEN_OVER.
func TestExternalDeleteLeavesOwnedSet(t *testing.T) {
	srv, root := standalone(t), newRoot(t)
	a := newBackend(t, srv, root)
	sa := open(t, a, 4*time.Second)
	keepAlive(t, a, sa.ID, time.Second)
	res := acquire(t, a, sa.ID, "x", "y")
	r1 := renew(t, a, sa.ID)
	if len(r1.Leases) != 2 {
		t.Fatalf("owned %v, want x and y", r1.Leases)
	}
	raw := rawConn(t, srv)
	if err := raw.Delete(root+"/x", -1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "x to leave the owned set", func() bool {
		r := renew(t, a, sa.ID)
		return r.Version != r1.Version && equalLeases(r.Leases, []driver.Lease{{Name: "y", Token: res[1].Token}})
	})
}

// Two applications with their own credentials put their roots under one
// parent: the parent the first created is open to the second. (It used to
// carry the first application's digest ACL, so the second could not
// create its root.)
func TestParentsOpenToOtherApplications(t *testing.T) {
	srv, parent := standalone(t), newRoot(t)
	a := newBackend(t, srv, parent+"/app-a", zksimba.WithDigestAuth("app-a", "pw-a"))
	open(t, a, 4*time.Second)
	b := newBackend(t, srv, parent+"/app-b", zksimba.WithDigestAuth("app-b", "pw-b"))
	sb := open(t, b, 4*time.Second)
	if tok := acquire(t, b, sb.ID, "x")[0].Token; tok == 0 {
		t.Fatal("the second application could not acquire in its own root")
	}
	raw := rawConn(t, srv)
	if _, _, err := raw.GetACL(parent + "/app-a"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated GetACL of app-a's root = %v, want ErrNoAuth: roots keep their digest ACL", err)
	}
}
