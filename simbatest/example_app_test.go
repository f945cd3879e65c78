package simbatest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/simbatest"
	"github.com/simba-go/simba/term"
)

// An application's leader-only job, as a user would write it: it runs
// only while its process leads, and stamps each run with the fencing token.
type reportJob struct{ runs, lastToken atomic.Int64 }

func (j *reportJob) run(ctx context.Context, tm *term.Term) error {
	if err := tm.EnsureValid(100 * time.Millisecond); err != nil {
		return err
	}
	j.runs.Add(1)
	j.lastToken.Store(int64(tm.Token()))
	<-ctx.Done()
	return nil
}

// startApp starts one process of the application on backend b.
func startApp(t *testing.T, b session.Backend, job *reportJob) *election.Election {
	t.Helper()
	s, err := session.Open(t.Context(), b,
		session.WithConfig(deadline.Config{LeaseDuration: 2 * time.Second, RenewInterval: 600 * time.Millisecond}),
		session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e, err := election.Start(s, "report", election.RunWhileLeader(job.run))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestExampleLeaderOnlyJob is the example of the README: a user's test of
// their leader-only code against a real Redis in a container. Two processes
// of the app share one Redis; the job runs on one at a time, and after the
// leader stops, the other takes over with a higher token.
func TestExampleLeaderOnlyJob(t *testing.T) {
	redis := simbatest.Redis(t) // simbatest.Postgres(t), MySQL(t), ZooKeeper(t) work alike

	jobs := []*reportJob{{}, {}}
	elections := []*election.Election{
		startApp(t, redis.Backend, jobs[0]),
		startApp(t, redis.NewBackend(t), jobs[1]), // a second process of the app
	}

	waitFor(t, func() bool { return jobs[0].runs.Load()+jobs[1].runs.Load() == 1 })
	won := 0
	if jobs[1].runs.Load() == 1 {
		won = 1
	}
	first := jobs[won].lastToken.Load()
	if err := elections[won].Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	next := jobs[1-won]
	waitFor(t, func() bool { return next.runs.Load() == 1 })
	if next.lastToken.Load() <= first {
		t.Fatalf("token went from %d to %d", first, next.lastToken.Load())
	}
}

// waitFor polls cond for up to 15 s: real servers, real time.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
