package etcdsimba_test

import (
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// conformance runs the kit against eps, with the revoke guard as it is
// by default (ADR 0305: on, on the tests' etcd 3.4.23, until every member
// is proven fixed) and turned off by WithoutRevokeGuard. The data loss is
// the deletion of the run's namespaces by prefix (an operator's `etcdctl
// del --prefix`); a restore from a snapshot is
// TestRestoreFromSnapshotQuarantines.
func conformance(t *testing.T, eps []string, guards ...bool) {
	for _, guard := range guards {
		name := "default"
		if !guard {
			name = "WithoutRevokeGuard"
		}
		t.Run(name, func(t *testing.T) { conformanceWith(t, eps, guard) })
	}
}

func conformanceWith(t *testing.T, eps []string, guard bool) {
	const lease, maxDelay = 2 * time.Second, 2 * time.Second
	cli := newClient(t, eps)
	base := newNamespace(t)
	opts := []etcdsimba.Option{etcdsimba.WithMaxLease(lease), etcdsimba.WithMaxLockDelay(maxDelay)}
	// The guard holds a name whose term ended without a release for its
	// session's lease after the first candidate finds the end; without it
	// the name is free at once.
	var hold time.Duration
	if guard {
		hold = lease
	} else {
		opts = append(opts, etcdsimba.WithoutRevokeGuard())
	}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			return newBackendNoInit(t, cli, base+"/"+namespace, opts...)
		},
		Init: func(t *testing.T, namespace string) {
			b := newBackendNoInit(t, cli, base+"/"+namespace, opts...)
			if err := b.Init(ctxT(t, 10*time.Second)); err != nil {
				t.Fatalf("Init: %v", err)
			}
		},
		LoseData: func(t *testing.T) {
			if _, err := cli.Delete(ctxT(t, 10*time.Second), base+"/", clientv3.WithPrefix()); err != nil {
				t.Fatalf("delete %s/: %v", base, err)
			}
		},
		Lease:    lease,
		MaxLease: lease,
		// The server expires a lease on its 500 ms revocation tick, a little
		// after its TTL.
		ExpiryGrace: time.Second,
		// The delay is an etcd lease of its own, from the first candidate
		// that finds the holder's key gone (ADR 0256).
		MaxLockDelay:    maxDelay,
		HoldAfterExpiry: hold,
	})
}

func TestConformance(t *testing.T) { conformance(t, single(t), true, false) }

// TestConformanceCluster runs the default only: the guard's setting
// changes nothing the cluster adds (TestConformance runs both).
func TestConformanceCluster(t *testing.T) { conformance(t, endpoints(t, "SIMBA_ETCD_CLUSTER"), true) }
