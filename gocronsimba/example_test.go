package gocronsimba_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/gocronsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// Each scheduler of the fleet asks its own election before every run:
// only the leader runs the job, with the term's fencing token at hand.
func ExampleElector() {
	b, _ := memory.New() // in production: a PostgreSQL, MySQL, Redis or ZooKeeper backend
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()
	won := make(chan struct{})
	e, _ := election.Start(s, "report-scheduler", election.OnWon(func(*term.Term) { close(won) }))
	defer e.Close()
	<-won

	elector := gocronsimba.Elector(e)
	sched, _ := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	ran := make(chan uint64, 1)
	_, _ = sched.NewJob(gocron.DurationJob(time.Hour),
		gocron.NewTask(elector.Task(func(ctx context.Context, t *term.Term) error {
			ran <- t.Token() // pass it to what the job writes
			return nil
		})),
		gocron.WithStartAt(gocron.WithStartImmediately()))
	sched.Start()
	fmt.Println("the leader ran the job with token", <-ran)
	_ = sched.Shutdown()
	// Output: the leader ran the job with token 1
}

// Any scheduler may run the job, one at a time: each run holds the lock
// named after the job.
func ExampleLocker() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	locker := gocronsimba.Locker(s, gocronsimba.HoldAtLeast(time.Second))
	defer locker.Close()
	sched, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	ran := make(chan string, 1)
	_, _ = sched.NewJob(gocron.DurationJob(time.Hour),
		gocron.NewTask(locker.Task("nightly-report", func(ctx context.Context, t *term.Term) error {
			ran <- t.String()
			return nil
		})),
		gocron.WithName("nightly-report"),
		gocron.WithStartAt(gocron.WithStartImmediately()))
	sched.Start()
	fmt.Println("ran under", <-ran)
	_ = sched.Shutdown()
	// Output: ran under gocron:nightly-report#1
}
