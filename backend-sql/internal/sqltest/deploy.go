package sqltest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
)

// The deployment matrix's load (issue 21, docs/deployment/sql.md): calls
// of every kind at once, under a setting of the user's pool.

// ConcurrentCalls runs workers that open, acquire, renew, release and
// close on a few shared names at once, for a second: every call must
// succeed, and no name may have two holders by the tokens granted.
func ConcurrentCalls(t *testing.T, b driver.Backend) {
	t.Helper()
	ctx := Ctx(t)
	names := []string{"a", "b"}
	var mu sync.Mutex
	holder := map[string]driver.ID{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	stop := time.Now().Add(time.Second)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := cycle(ctx, b, names, &mu, holder); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func cycle(ctx context.Context, b driver.Backend, names []string, mu *sync.Mutex, holder map[string]driver.ID) error {
	o, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() { _ = b.Close(ctx, o.ID) }()
	rep, err := b.Acquire(ctx, driver.AcquireRequest{ID: o.ID, Names: names})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	var held []driver.Lease
	if rep.Quarantine > 0 {
		return nil
	}
	for i, r := range rep.Results {
		if r.Err != nil {
			return fmt.Errorf("acquire %q: %w", names[i], r.Err)
		}
		tok := r.Token
		if tok == 0 {
			continue
		}
		mu.Lock()
		h, busy := holder[names[i]]
		holder[names[i]] = o.ID
		mu.Unlock()
		if busy {
			return fmt.Errorf("%q granted to %s while %s holds it", names[i], o.ID, h)
		}
		held = append(held, driver.Lease{Name: names[i], Token: tok})
	}
	if _, err := b.Renew(ctx, driver.RenewRequest{ID: o.ID}); err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	mu.Lock()
	for _, l := range held {
		delete(holder, l.Name)
	}
	mu.Unlock()
	if len(held) > 0 {
		if err := b.Release(ctx, driver.ReleaseRequest{ID: o.ID, Leases: held}); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	if err := b.Close(ctx, o.ID); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}
