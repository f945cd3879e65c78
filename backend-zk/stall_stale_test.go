package zksimba_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/simba-go/simba/session/driver"
)

// A release sent to a follower that is then stopped waits in that
// follower's socket. The stall wrapper closes the connection, the session
// moves, the release is sent again and done, and another session takes
// the name. When the follower resumes it reads the old delete and hands it
// to the leader: it must not delete the new holder's node (ZooKeeper
// refuses a request of a session that has moved to another server).
func TestStaleReleaseInAStoppedFollowerDeletesNoNewHolder(t *testing.T) {
	zks := startZK(t, 3)
	srv, root := addrs(zks), newRoot(t)
	const timeout = 3 * time.Second
	a, c := newBackend(t, srv, root), newBackendNoInit(t, srv, root)
	var sa driver.OpenReply
	var fol *zkServer
	for attempt := 0; fol == nil; attempt++ {
		if attempt == 20 {
			t.Fatal("no session landed on a follower in 20 attempts")
		}
		sa = open(t, a, timeout)
		var z *zkServer
		waitUntil(t, 10*time.Second, "the server of the session", func() bool {
			z = serverOf(zks, sa.ID)
			return z != nil
		})
		if z.mode() == "follower" {
			fol = z
		} else {
			must(t, a.Close(ctxT(t, 5*time.Second), sa.ID))
		}
	}
	keepAlive(t, a, sa.ID, timeout/6)
	tok := acquire(t, a, sa.ID, "x")[0].Token
	if tok == 0 {
		t.Fatal("a did not acquire x")
	}
	var sc driver.OpenReply
	for {
		sc = open(t, c, timeout)
		var z *zkServer
		waitUntil(t, 10*time.Second, "the server of c's session", func() bool {
			z = serverOf(zks, sc.ID)
			return z != nil
		})
		if z != fol {
			break
		}
		must(t, c.Close(ctxT(t, 5*time.Second), sc.ID))
	}
	keepAlive(t, c, sc.ID, timeout/6)

	fol.pause()
	paused := true
	defer func() {
		if paused {
			fol.resume()
		}
	}()
	must(t, a.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sa.ID, Leases: []driver.Lease{{Name: "x", Token: tok}}}))
	var got uint64
	waitUntil(t, 10*time.Second, "c to acquire x", func() bool {
		got = acquire(t, c, sc.ID, "x")[0].Token
		return got != 0
	})
	if got <= tok {
		t.Fatalf("c's token %d, want > %d", got, tok)
	}
	fol.resume()
	paused = false

	// Let the follower read its socket and the leader answer it.
	raw, _, err := zk.Connect(srv, 10*time.Second, zk.WithLogInfo(false))
	must(t, err)
	defer raw.Close()
	<-time.After(2 * time.Second)
	_, err = raw.Sync(root)
	must(t, err)
	ok, st, err := raw.Exists(root + "/x")
	must(t, err)
	if !ok {
		t.Fatalf("x's node is gone after the stopped follower resumed: the old release deleted c's lease (token %d)", got)
	}
	if want := sessionOf(t, sc.ID); st.EphemeralOwner != want {
		t.Fatalf("x is owned by %#x, want c's session %#x", st.EphemeralOwner, want)
	}
	// And c still holds it at its next renewal.
	r, err := c.Renew(ctxT(t, 5*time.Second), driver.RenewRequest{ID: sc.ID})
	must(t, err)
	if len(r.Leases) != 1 || r.Leases[0].Token != got {
		t.Fatalf("c's renewal lists %v, want x at %d", r.Leases, got)
	}
}

// sessionOf is the ZooKeeper session id of a driver session id.
func sessionOf(t *testing.T, id driver.ID) int64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(string(id), "0x"), 16, 64)
	must(t, err)
	return int64(v)
}
