package zksimba_test

import (
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
func conformance(t *testing.T, srv []string) {
	const lease = 2 * time.Second
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	base := "/simba-test/kit-" + hex.EncodeToString(b[:])
	opts := []zksimba.Option{zksimba.WithMaxLease(lease)}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			return newBackendNoInit(t, srv, base+"/"+namespace, opts...)
		},
		Init: func(t *testing.T, namespace string) {
			b := newBackendNoInit(t, srv, base+"/"+namespace, opts...)
			if err := b.Init(ctxT(t, 10*time.Second)); err != nil {
				t.Fatalf("Init: %v", err)
			}
		},
		LoseData:    func(t *testing.T) { deleteAll(t, rawConn(t, srv), base) },
		Lease:       lease,
		MaxLease:    lease,
		ExpiryGrace: lease - zksimba.Grant(lease) + time.Second,
	})
}

func TestConformanceStandalone(t *testing.T) { conformance(t, standalone(t)) }

func TestConformanceEnsemble(t *testing.T) { conformance(t, ensemble(t)) }
