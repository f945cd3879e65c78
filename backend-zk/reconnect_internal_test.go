package zksimba

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// A session that reconnects to another server of the ensemble is given
// that server's clamp of its timeout (servers can differ in
// minSessionTimeout, tickTime). Open refuses a timeout above WithMaxLease;
// a reconnect that negotiates one must not make a renewal grant more than
// Open could have: a grant above MaxLease outlives the quarantine after a
// data loss (ADR 0130). The reconnect is simulated by handing the session
// the connect response such a server sends.
func TestReconnectWithLongerTimeoutDoesNotLengthenGrants(t *testing.T) {
	srv := os.Getenv("SIMBA_ZK_SERVERS")
	if srv == "" {
		t.Fatal("SIMBA_ZK_SERVERS is not set: run `make services` and `. .services/env`")
	}
	const maxLease = 2 * time.Second
	b, err := New(strings.Split(srv, ","), "/simba-test/internal-reconnect-timeout",
		WithMaxLease(maxLease), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: maxLease, Owner: driver.Owner{Identity: "reconnect-test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background(), o.ID) })
	s, err := b.lookup(o.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.onConnect(connectInfo{sessionID: s.sid.Load(), timeout: 10 * maxLease})
	r, err := b.Renew(ctx, driver.RenewRequest{ID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining > Grant(maxLease) {
		t.Fatalf("renewal after a reconnect that negotiated %v granted %v, more than %v (Grant of WithMaxLease(%v))", 10*maxLease, r.Remaining, Grant(maxLease), maxLease)
	}
}
