package pgsimba_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
)

func open(t testing.TB, b session.Backend, lease time.Duration) session.ID {
	t.Helper()
	rep, err := b.Open(ctxT(t), session.OpenRequest{LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if rep.Remaining <= 0 || rep.Remaining > lease {
		t.Fatalf("Open: Remaining = %v, want in (0, %v]", rep.Remaining, lease)
	}
	return rep.ID
}

func acquire(t testing.TB, b session.Backend, id session.ID, name string) uint64 {
	t.Helper()
	rep, err := b.Acquire(ctxT(t), session.AcquireRequest{ID: id, Names: []string{name}})
	if err != nil {
		t.Fatalf("Acquire(%s): %v", name, err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Err != nil || rep.Results[0].Name != name {
		t.Fatalf("Acquire(%s) = %+v", name, rep)
	}
	return rep.Results[0].Token
}

func TestOpenRenewVersions(t *testing.T) {
	b := newBackend(t, newPool(t, pgURL(t), nil), "")
	id := open(t, b, 10*time.Second)
	if len(id) != 32 {
		t.Fatalf("id %q: want 32 hex digits (128 bits)", id)
	}
	r1, err := b.Renew(ctxT(t), session.RenewRequest{ID: id})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if !r1.Full || len(r1.Leases) != 0 || r1.Version == 0 || r1.Remaining <= 9*time.Second || r1.Remaining > 10*time.Second {
		t.Fatalf("Renew = %+v, want full empty list, version > 0, remaining ≈ 10s", r1)
	}
	r2, err := b.Renew(ctxT(t), session.RenewRequest{ID: id, KnownVersion: r1.Version})
	if err != nil || r2.Full || r2.Version != r1.Version {
		t.Fatalf("Renew(known) = %+v, %v; want same version, not full", r2, err)
	}
	tok := acquire(t, b, id, "a")
	r3, err := b.Renew(ctxT(t), session.RenewRequest{ID: id, KnownVersion: r1.Version})
	if err != nil || !r3.Full || r3.Version == r1.Version || len(r3.Leases) != 1 || r3.Leases[0] != (session.Lease{Name: "a", Token: tok}) {
		t.Fatalf("Renew after acquire = %+v, %v; want new version listing a#%d", r3, err, tok)
	}
	if err := b.Release(ctxT(t), session.ReleaseRequest{ID: id, Leases: []session.Lease{{Name: "a", Token: tok}}}); err != nil {
		t.Fatal(err)
	}
	r4, err := b.Renew(ctxT(t), session.RenewRequest{ID: id, KnownVersion: r3.Version})
	if err != nil || !r4.Full || r4.Version == r3.Version || r4.Version == r1.Version || len(r4.Leases) != 0 {
		t.Fatalf("Renew after release = %+v, %v; want a version never used before and no lease", r4, err)
	}
}

func TestAcquireExclusiveTokensRise(t *testing.T) {
	b := newBackend(t, newPool(t, pgURL(t), nil), "")
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	t1 := acquire(t, b, a, "leader")
	if t1 == 0 {
		t.Fatal("first acquire of a free name got no token")
	}
	if got := acquire(t, b, a, "leader"); got != t1 {
		t.Fatalf("re-acquire by owner = %d, want its token %d", got, t1)
	}
	if got := acquire(t, b, c, "leader"); got != 0 {
		t.Fatalf("acquire of a held name = %d, want 0", got)
	}
	// A release with the wrong token is a no-op.
	if err := b.Release(ctxT(t), session.ReleaseRequest{ID: a, Leases: []session.Lease{{Name: "leader", Token: t1 + 1}}}); err != nil {
		t.Fatal(err)
	}
	if got := acquire(t, b, c, "leader"); got != 0 {
		t.Fatalf("after a release with a wrong token, acquire = %d, want 0", got)
	}
	if err := b.Release(ctxT(t), session.ReleaseRequest{ID: a, Leases: []session.Lease{{Name: "leader", Token: t1}}}); err != nil {
		t.Fatal(err)
	}
	t2 := acquire(t, b, c, "leader")
	if t2 <= t1 {
		t.Fatalf("token after release = %d, want > %d", t2, t1)
	}
	// A late release by the old owner does not touch the new term.
	if err := b.Release(ctxT(t), session.ReleaseRequest{ID: a, Leases: []session.Lease{{Name: "leader", Token: t1}}}); err != nil {
		t.Fatal(err)
	}
	if got := acquire(t, b, a, "leader"); got != 0 {
		t.Fatalf("after a late release, acquire by the old owner = %d, want 0", got)
	}
}

func TestAcquireBatchAndInvalidNames(t *testing.T) {
	b := newBackend(t, newPool(t, pgURL(t), nil), "")
	a := open(t, b, 10*time.Second)
	names := []string{"z", "bad name", "a", "z", "m:1", ""}
	rep, err := b.Acquire(ctxT(t), session.AcquireRequest{ID: a, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(names) {
		t.Fatalf("%d results for %d names", len(rep.Results), len(names))
	}
	for i, r := range rep.Results {
		bad := names[i] == "bad name" || names[i] == ""
		switch {
		case r.Name != names[i]:
			t.Errorf("result %d is for %q, want %q", i, r.Name, names[i])
		case bad && !errors.Is(r.Err, deadline.ErrInvalidName):
			t.Errorf("result %d (%q): Err = %v, want ErrInvalidName", i, names[i], r.Err)
		case !bad && (r.Err != nil || r.Token == 0):
			t.Errorf("result %d (%q) = %+v, want a token", i, names[i], r)
		}
	}
	if rep.Results[0].Token != rep.Results[3].Token {
		t.Errorf("duplicate name got tokens %d and %d", rep.Results[0].Token, rep.Results[3].Token)
	}
	err = b.Release(ctxT(t), session.ReleaseRequest{ID: a, Leases: []session.Lease{{Name: "x y", Token: 1}}})
	if !errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("Release(invalid name) = %v, want ErrInvalidName", err)
	}
}

func TestInvalidPrefix(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	for _, p := range []string{"", "Upper", "1abc", "a-b", "x; DROP TABLE y", "abcdefghijklmnopqrstuvwxyz0123456"} {
		_, err := pgsimba.New(ctxT(t), pool, pgsimba.WithPrefix(p))
		if !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
			t.Errorf("New(prefix %q) = %v, want ErrInvalidPrefix", p, err)
		}
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b1, b2 := newBackend(t, pool, ""), newBackend(t, pool, "")
	if acquire(t, b1, open(t, b1, 10*time.Second), "x") == 0 || acquire(t, b2, open(t, b2, 10*time.Second), "x") == 0 {
		t.Fatal("the same name in two namespaces must be free in each")
	}
	// A session of one namespace is unknown in the other.
	id := open(t, b1, 10*time.Second)
	if _, err := b2.Renew(ctxT(t), session.RenewRequest{ID: id}); !errors.Is(err, session.ErrExpired) {
		t.Fatalf("Renew in another namespace = %v, want ErrExpired", err)
	}
}

func TestExpiredSessionStaysExpired(t *testing.T) {
	b := newBackend(t, newPool(t, pgURL(t), nil), "")
	const lease = 300 * time.Millisecond
	a := open(t, b, lease)
	t1 := acquire(t, b, a, "job")
	c := open(t, b, 10*time.Second)
	<-time.After(2 * lease) // real database time must pass
	for _, op := range []func() error{
		func() error { _, err := b.Renew(ctxT(t), session.RenewRequest{ID: a}); return err },
		func() error {
			_, err := b.Acquire(ctxT(t), session.AcquireRequest{ID: a, Names: []string{"other"}})
			return err
		},
		func() error { _, err := b.Renew(ctxT(t), session.RenewRequest{ID: a}); return err },
	} {
		if err := op(); !errors.Is(err, session.ErrExpired) {
			t.Fatalf("call on an expired session = %v, want ErrExpired", err)
		}
	}
	t2 := acquire(t, b, c, "job")
	if t2 <= t1 {
		t.Fatalf("takeover token = %d, want > %d", t2, t1)
	}
	// An unknown or malformed id is expired too; closing it is not an error.
	for _, id := range []session.ID{"", "nope", "0123456789abcdef0123456789abcdef"} {
		if _, err := b.Renew(ctxT(t), session.RenewRequest{ID: id}); !errors.Is(err, session.ErrExpired) {
			t.Errorf("Renew(%q) = %v, want ErrExpired", id, err)
		}
		if err := b.Close(ctxT(t), id); err != nil {
			t.Errorf("Close(%q) = %v, want nil", id, err)
		}
	}
	if err := b.Close(ctxT(t), a); err != nil {
		t.Errorf("Close(expired) = %v, want nil", err)
	}
}

func TestCloseFreesLeases(t *testing.T) {
	b := newBackend(t, newPool(t, pgURL(t), nil), "")
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	t1 := acquire(t, b, a, "x")
	if err := b.Close(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	if t2 := acquire(t, b, c, "x"); t2 <= t1 {
		t.Fatalf("acquire after Close = %d, want > %d", t2, t1)
	}
	if _, err := b.Renew(ctxT(t), session.RenewRequest{ID: a}); !errors.Is(err, session.ErrExpired) {
		t.Fatalf("Renew after Close = %v, want ErrExpired", err)
	}
}

// Emptying the lease table (the SQL form of data loss) must not make
// tokens go back: new rows start from the database clock in microseconds.
func TestTokensRiseAfterDataLoss(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := freshPrefix()
	b := newBackend(t, pool, prefix)
	a := open(t, b, 10*time.Second)
	var last uint64
	for i := range 3 {
		tok := acquire(t, b, a, "n")
		if tok <= last {
			t.Fatalf("round %d: token %d, want > %d", i, tok, last)
		}
		last = tok
		if _, err := pool.Exec(ctxT(t), "TRUNCATE "+prefix+"_leases, "+prefix+"_sessions"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Renew(ctxT(t), session.RenewRequest{ID: a}); !errors.Is(err, session.ErrExpired) {
			t.Fatalf("Renew after data loss = %v, want ErrExpired", err)
		}
		a = open(t, b, 10*time.Second)
	}
}

func TestConcurrentSchemaCreation(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := freshPrefix()
	t.Cleanup(func() { dropSchema(t, pool, prefix) })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithPrefix(prefix))
			if err == nil {
				_, err = b.Open(ctxT(t), session.OpenRequest{LeaseDuration: time.Second})
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("New #%d: %v", i, err)
		}
	}
}

// Many sessions competing for the same names: each name has at most one
// owner at a time and its tokens only rise (no deadlock errors either).
func TestContendedAcquire(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	b := newBackend(t, pool, "")
	names := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string][]uint64{}
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			id := open(t, b, 10*time.Second)
			for i := range 20 {
				// Each worker asks in its own order; the backend sorts.
				req := []string{names[(w+i)%4], names[(w+i+1)%4], names[(w+i+2)%4]}
				rep, err := b.Acquire(ctxT(t), session.AcquireRequest{ID: id, Names: req})
				if err != nil {
					errs <- err
					return
				}
				var rel []session.Lease
				for _, r := range rep.Results {
					if r.Token != 0 {
						rel = append(rel, session.Lease{Name: r.Name, Token: r.Token})
					}
				}
				mu.Lock()
				for _, l := range rel {
					seen[l.Name] = append(seen[l.Name], l.Token)
				}
				mu.Unlock()
				if err := b.Release(ctxT(t), session.ReleaseRequest{ID: id, Leases: rel}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	for n, toks := range seen {
		uniq := map[uint64]bool{}
		for _, tk := range toks {
			if uniq[tk] {
				t.Errorf("name %s: token %d handed out twice (two owners)", n, tk)
			}
			uniq[tk] = true
		}
	}
}

// A renewal that waits on a lock past the session's expiry must answer
// expired: it judges by the clock after it got the lock.
func TestRenewAfterLockWaitDoesNotRevive(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := freshPrefix()
	b := newBackend(t, pool, prefix)
	const lease = 300 * time.Millisecond
	a := open(t, b, lease)
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctxT(t), "SELECT 1 FROM "+prefix+"_sessions WHERE id = $1 FOR UPDATE", string(a)); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := b.Renew(ctxT(t), session.RenewRequest{ID: a})
		res <- err
	}()
	<-time.After(2 * lease) // the session expires while the renewal waits
	if err := tx.Rollback(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, session.ErrExpired) {
			t.Fatalf("Renew after waiting past expiry = %v, want ErrExpired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Renew did not return after the lock was released")
	}
}

func ExampleConnect() {
	ctx := context.Background()
	b, err := pgsimba.Connect(ctx, "postgres://postgres@127.0.0.1:5432/test", pgsimba.WithPrefix("myapp"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Shutdown()
	// Hand b to the session engine; it is a session.Backend and a
	// session.Broadcaster.
	var _ session.Backend = b
}
