package etcdsimba_test

import (
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
)

// TestCrashFailover stops renewing a holder (a process that died) and
// measures how long after its last renewal a waiting candidate holds the
// name, told by the watch, not by polling: with WithoutRevokeGuard the
// etcd lease's TTL plus the server's revocation tick (500 ms); by default
// on an affected etcd (the tests' 3.4.23: the revoke guard on, ADR 0305)
// one lease more, the guard's delay, and a second tick: the guard's cost.
func TestCrashFailover(t *testing.T) {
	st, err := newClient(t, single(t)).Status(ctxT(t, 5*time.Second), single(t)[0])
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, tc := range []struct {
		name  string
		opts  []etcdsimba.Option
		guard bool
	}{
		{"default", nil, etcdsimba.RevokesEarly(st.Version)},
		{"WithoutRevokeGuard", []etcdsimba.Option{etcdsimba.WithoutRevokeGuard()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { crashFailover(t, tc.guard, tc.opts...) })
	}
}

func crashFailover(t *testing.T, guard bool, opts ...etcdsimba.Option) {
	const lease = 3 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, opts...)
	holder, cand := openOn(t, b, lease), openOn(t, b, lease)
	notices := make(chan struct{}, 16)
	stop, err := b.Subscribe(func(n driver.Notice) {
		if n.Name == "x" {
			notices <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	holder.mustAcquire("x")
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	last := time.Now() // the holder "dies" here: no more renewals
	if tok, _, _ := cand.acquire("x"); tok != 0 {
		t.Fatal("the candidate acquired a held name")
	}
	for {
		select {
		case <-notices:
		case <-time.After(lease / 3):
		}
		if _, err := cand.renew(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if tok, _, err := cand.acquire("x"); err != nil {
			t.Fatal(err)
		} else if tok != 0 {
			break
		}
	}
	took := time.Since(last)
	t.Logf("failover %v after the last renewal: %.3f × the lease (guard %v)", took, float64(took)/float64(lease), guard)
	switch {
	case !guard && (took < lease-100*time.Millisecond || took > lease+time.Second):
		t.Errorf("failover took %v with a %v lease; want about the lease plus the server's 500 ms revocation tick", took, lease)
	case guard && (took < 2*lease-100*time.Millisecond || took > 2*lease+2*time.Second):
		t.Errorf("failover took %v with a %v lease under the revoke guard; want about twice the lease plus two of the server's 500 ms revocation ticks", took, lease)
	}
}
