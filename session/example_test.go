package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

func ExampleOpen() {
	b, _ := memory.New() // in production: pgsimba, mysqlsimba, redisbackend or zkbackend
	s, err := session.Open(context.Background(), b,
		session.WithConfig(deadline.Config{LeaseDuration: 30 * time.Second}), // renews every 10s
		session.WithLogger(nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println(s.State(), s.Config().RenewInterval)
	// Output: LIVE 10s
}

func ExampleSession_Snapshot() {
	b, _ := memory.New(memory.WithIDSource(func() session.ID { return "3f2a" }))
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()
	snap := s.Snapshot()
	snap.Remaining = 0 // it moves with the clock
	out, _ := json.Marshal(snap)
	fmt.Println(string(out))
	// Output: {"id":"3f2a","state":"LIVE","remaining":"0s","renew_every":"5s","entries":[]}
}

func ExampleLogEvents() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level:       slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	}))
	b, _ := memory.New(memory.WithGrantFraction(5, 12), memory.WithIDSource(func() session.ID { return "zk-like" }))
	logged := make(chan struct{})
	s, _ := session.Open(context.Background(), b, session.WithLogger(logger),
		session.WithListener(func(e session.Event) { // runs after the logger's listener
			if e.Kind == session.SessionLeaseShortened {
				close(logged)
			}
		}))
	<-logged
	s.Close()
	// Output: level=WARN msg="simba: backend grants a shorter lease than two renewal periods; renewing more often" session=zk-like state=LIVE granted=6.25s renew_every=2.045833333s
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func ExampleWithListener() {
	b, _ := memory.New()
	opened := make(chan session.Event, 1)
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil), session.WithListener(func(e session.Event) {
		if e.Kind == session.SessionOpened {
			opened <- e
		}
	}))
	defer s.Close()
	e := <-opened
	fmt.Println(e.Kind, e.State, e.Remaining)
	// Output: SessionOpened LIVE 15s
}
