package zksimba_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/driver"
)

// An ensemble rebuilt from empty disks restarts its zxids low, so czxid
// tokens would go backwards. A Backend value refuses such a token rather
// than hand it out.
func TestTokensNeverGoBackwardsAfterDataLoss(t *testing.T) {
	srvs := startZK(t, 1)
	srv := srvs[0]
	b := newBackend(t, []string{srv.addr()}, newRoot(t))
	sess := open(t, b, 2*time.Second)
	// Push the zxid up so the first token after the loss is lower.
	var high uint64
	for range 20 {
		r := acquire(t, b, sess.ID, "jobs")
		high = r[0].Token
		if err := b.Release(ctxT(t, 10*time.Second), driver.ReleaseRequest{ID: sess.ID, Leases: []driver.Lease{{Name: "jobs", Token: high}}}); err != nil {
			t.Fatal(err)
		}
	}
	if high == 0 {
		t.Fatal("no token before the loss")
	}
	r := acquire(t, b, sess.ID, "jobs")
	high = r[0].Token

	srv.kill()
	must(t, os.RemoveAll(filepath.Join(srv.dir, "data", "version-2")))
	srv.restart()
	srv.waitServing(60 * time.Second)

	// The old session is gone with the data; a new one acquires the name.
	var after driver.OpenReply
	waitUntil(t, 30*time.Second, "a new session on the rebuilt server", func() bool {
		reply, err := b.Open(ctxT(t, 5*time.Second), driver.OpenRequest{LeaseDuration: 2 * time.Second})
		after = reply
		return err == nil
	})
	res, err := b.Acquire(ctxT(t, 10*time.Second), driver.AcquireRequest{ID: after.ID, Names: []string{"jobs"}})
	if err != nil {
		t.Fatalf("Acquire after the loss: %v", err)
	}
	if got := res.Results[0]; got.Token != 0 || !errors.Is(got.Err, zksimba.ErrTokenRegressed) {
		t.Fatalf("Acquire after the loss = token %d, err %v; want no token and ErrTokenRegressed (highest before: %d)", got.Token, got.Err, high)
	}
}
