package zksimba_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// conformance runs the kit against srv. The backend grants 5/12 of the
// session timeout per renewal but the server expires the session only after
// the whole timeout, on a tick boundary: ExpiryGrace covers the rest. The
// data loss is the deletion of the run's namespace roots (an operator's
// deleteall; an ensemble rebuilt from empty disks is
// TestTokensRiseInEveryProcessAfterEnsembleRebuilt).
func conformance(t *testing.T, srv []string, initNS func(context.Context, *zksimba.Backend) error) {
	const lease, maxDelay = 2 * time.Second, 2 * time.Second
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	base := "/simba-test/kit-" + hex.EncodeToString(b[:])
	opts := []zksimba.Option{zksimba.WithMaxLease(lease), zksimba.WithMaxLockDelay(maxDelay)}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			return newBackendNoInit(t, srv, base+"/"+namespace, opts...)
		},
		Init: func(t *testing.T, namespace string) {
			b := newBackendNoInit(t, srv, base+"/"+namespace, opts...)
			if err := initNS(ctxT(t, 10*time.Second), b); err != nil {
				t.Fatalf("Init: %v", err)
			}
		},
		LoseData:    func(t *testing.T) { deleteAll(t, rawConn(t, srv), base) },
		Lease:       lease,
		MaxLease:    lease,
		ExpiryGrace: lease - zksimba.Grant(lease) + time.Second,
		// The delay counts from the first candidate that finds the holder's
		// node gone, on the leader's clock (ADR 0257).
		MaxLockDelay: maxDelay,
	})
}

// The kit's namespaces are new. On the standalone server they are made by
// ForceInit, the public way (not Init: it refuses on servers younger than
// MaxLease; init_test.go tests it); on the ensemble by InitForTest, which
// spares the kit's hundred namespaces ForceInit's wait of up to a second
// for the epoch's first token second.
func TestConformanceStandalone(t *testing.T) {
	conformance(t, standalone(t), func(ctx context.Context, b *zksimba.Backend) error { return b.ForceInit(ctx) })
}

func TestConformanceEnsemble(t *testing.T) {
	conformance(t, ensemble(t), func(ctx context.Context, b *zksimba.Backend) error { return zksimba.InitForTest(ctx, b) })
}
