package redissimba_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// acquireLibraries counts the libraries with an acquire function on c's
// server (ADR 0148).
func acquireLibraries(t *testing.T, c redis.UniversalClient) int {
	t.Helper()
	libs, err := c.FunctionList(ctxT(t), redis.FunctionListQuery{LibraryNamePattern: "simba_*"}).Result()
	if err != nil {
		t.Fatalf("FUNCTION LIST: %v", err)
	}
	n := 0
	for _, l := range libs {
		for _, f := range l.Functions {
			if strings.HasPrefix(f.Name, "simba_acquire_") {
				n++
			}
		}
	}
	return n
}

// The acquire operation loads its function where the server has none (a
// fresh server, after FUNCTION FLUSH) and keeps working; the restart check
// still reads the serving process's run_id (an uninitialised namespace is
// quarantined, an initialised one is not).
func TestAcquireFunctionLoadsItselfAndSurvivesFlush(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	if n := acquireLibraries(t, c); n != 0 {
		t.Fatalf("a fresh server has %d acquire libraries", n)
	}
	b := newBackend(t, c, namespace(t))
	id := open(t, b, 5*time.Second)
	release(t, b, id, "x", acquire(t, b, id, "x")[0])
	if n := acquireLibraries(t, c); n != 1 {
		t.Fatalf("after an acquire: %d acquire libraries, want 1", n)
	}
	if err := c.FunctionFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if tok := acquire(t, b, id, "x")[0]; tok == 0 {
		t.Fatal("acquire after FUNCTION FLUSH took nothing")
	}
	if n := acquireLibraries(t, c); n != 1 {
		t.Fatalf("after FUNCTION FLUSH and an acquire: %d acquire libraries, want 1", n)
	}
	u := newUninitialised(t, c, namespace(t))
	r, err := u.Acquire(ctxT(t), driver.AcquireRequest{ID: open(t, u, 5*time.Second), Names: []string{"x"}})
	if err != nil || r.Quarantine <= 0 {
		t.Fatalf("first Acquire of an uninitialised namespace through the function = %+v, %v; want a quarantine", r, err)
	}
}

// A server that refuses FCALL (here an ACL; Redis before 7 answers
// "unknown command" alike) gets the acquire script: the backend works as
// before, restart check included.
func TestAcquireWithoutFunctionsRunsTheScript(t *testing.T) {
	s := startServer(t)
	admin := s.client(s.addr())
	if err := admin.Do(ctxT(t), "ACL", "SETUSER", "nofn", "on", "nopass", // nopass: any password; go-redis sends AUTH only with one
		"~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "nofn", Password: "any", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(time.Second))
	id := open(t, b, time.Second)
	for range 2 { // the first call learns the refusal, the second goes straight to the script
		tok := acquire(t, b, id, "x")[0]
		if tok == 0 {
			t.Fatal("acquire without functions took nothing")
		}
		release(t, b, id, "x", tok)
	}
	if n := acquireLibraries(t, admin); n != 0 {
		t.Fatalf("%d acquire libraries on a server that refuses functions to the backend", n)
	}
	// The script still compares run_ids: an epoch written by another
	// process quarantines.
	if err := admin.Set(ctxT(t), "simba:{"+ns+"}:epoch", "0 0123456789abcdef", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"y"}})
	if err != nil || r.Quarantine <= 0 {
		t.Fatalf("Acquire under an epoch of another run_id = %+v, %v; want a quarantine", r, err)
	}
}

// The function compares the epoch with the run_id of the process serving
// it, also when it has cached it: an epoch naming another process is a
// loss, for the function as for the script.
func TestAcquireFunctionComparesRunIDs(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns, redissimba.WithMaxLease(time.Second))
		id := open(t, b, time.Second)
		release(t, b, id, "x", acquire(t, b, id, "x")[0]) // the function has cached its run_id
		if err := c.Set(ctxT(t), "simba:{"+ns+"}:epoch", "0 0123456789abcdef", 0).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"x"}})
		if err != nil || r.Quarantine <= 0 {
			t.Fatalf("Acquire under an epoch of another run_id = %+v, %v; want a quarantine", r, err)
		}
	})
}

// An ACL user without INFO cannot use Simba (every acquire reads it): the
// first Open says so, naming the command and the fix, with ErrServerUnsafe.
func TestACLWithoutINFORefusedAtStart(t *testing.T) {
	s := startServer(t)
	admin := s.client(s.addr())
	if err := admin.Do(ctxT(t), "ACL", "SETUSER", "noinfo", "on", "nopass", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "noinfo", Password: "any", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b := newUninitialised(t, c, namespace(t))
	_, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second})
	if !errors.Is(err, redissimba.ErrServerUnsafe) || !strings.Contains(err.Error(), "+info") {
		t.Fatalf("Open as a user without INFO = %v; want ErrServerUnsafe saying to allow +info", err)
	}
}
