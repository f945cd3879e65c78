package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func ExampleOpen() {
	b, _ := memory.New() // in production: pgsimba, mysqlsimba, redissimba or zksimba
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
	snap.Remaining, snap.InState = 0, 0 // they move with the clock
	out, _ := json.Marshal(snap)
	fmt.Println(string(out))
	// Output: {"id":"3f2a","state":"LIVE","in_state":"0s","remaining":"0s","renew_every":"5s","entries":[]}
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

func ExampleWithTermContext() {
	type requestID struct{}
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil),
		session.WithTermContext(func(parent context.Context, e session.Event) context.Context {
			// An instrumentation would start the term's span here.
			return context.WithValue(parent, requestID{}, fmt.Sprintf("%s#%d", e.Name, e.Token))
		}))
	defer s.Close()
	won := make(chan *term.Term, 1)
	c, _ := layer.MustOf(s).Claim("billing", wonFunc(func(t *term.Term) { won <- t }))
	layer.MustOf(s).Do(func() { c.Want(true) })
	fmt.Println((<-won).Context().Value(requestID{}))
	// Output: billing#1
}

// wonFunc is a ClaimHandler that reports won terms (elections, locks and
// groups are the real handlers).
type wonFunc func(*term.Term)

func (f wonFunc) Won(t *term.Term)                 { f(t) }
func (wonFunc) Lost(*term.Term, term.RevokeReason) {}
func (wonFunc) Closed()                            {}
