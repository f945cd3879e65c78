package zksimba_test

import (
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
)

// conformance runs the kit against srv. The backend grants 5/12 of the
// session timeout per renewal but the server expires the session only after
// the whole timeout, on a tick boundary: ExpiryGrace covers the rest.
func conformance(t *testing.T, srv []string) {
	const lease = 2 * time.Second
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			return newBackend(t, srv, "/simba-test/kit/"+namespace)
		},
		Lease:       lease,
		ExpiryGrace: lease - zksimba.Grant(lease) + time.Second,
	})
}

func TestConformanceStandalone(t *testing.T) { conformance(t, standalone(t)) }

func TestConformanceEnsemble(t *testing.T) { conformance(t, ensemble(t)) }
