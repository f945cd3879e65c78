package simbatest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/simbatest"
	"github.com/simba-go/simba/term"
)

// A test of leader-only code on etcd: simbatest.Etcd starts a member
// (WithCluster: three) in a container and returns its client and a Simba
// backend under its own prefix; another process of the app gets its own
// backend with NewBackend. The function below is a test body: run it
// with t.Run (TestExampleEtcd does).
func ExampleEtcd() {
	leaderOnlyOnEtcd := func(t *testing.T) {
		etcd := simbatest.Etcd(t) // or simbatest.Etcd(t, simbatest.WithCluster())
		s, err := session.Open(t.Context(), etcd.Backend, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ran := make(chan uint64, 1)
		e, err := election.Start(s, "report", election.RunWhileLeader(func(ctx context.Context, tm *term.Term) error {
			ran <- uint64(tm.Token())
			<-ctx.Done()
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if tok := <-ran; tok == 0 {
			t.Fatal("the leader's term has no fencing token")
		}
		// The app's own keys go under etcd.Prefix(), through etcd.Client.
	}
	fmt.Printf("%T\n", leaderOnlyOnEtcd)
	// Output: func(*testing.T)
}

// TestExampleEtcd is ExampleEtcd's test body, run.
func TestExampleEtcd(t *testing.T) {
	etcd := simbatest.Etcd(t)
	job := &reportJob{}
	startApp(t, etcd.Backend, job)
	waitFor(t, func() bool { return job.runs.Load() == 1 })
	if job.lastToken.Load() == 0 {
		t.Fatal("the leader's term has no fencing token")
	}
}
