package pgsimba_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

// terms is a ClaimHandler that reports terms won and attempts refused.
type terms struct {
	won     chan *term.Term
	refused chan error
}

func (c terms) Won(t *term.Term)                   { c.won <- t }
func (c terms) Lost(*term.Term, term.RevokeReason) {}
func (c terms) Closed()                            {}

func (c terms) Refused(err error) {
	select {
	case c.refused <- err:
	default:
	}
}

// With the default timing a candidate polls every 2.5 s to 5 s; a release
// on PostgreSQL reaches it through NOTIFY at once, so the engine hands over
// far sooner than any poll could.
func TestEngineHandoverByNotify(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	newBackend(t, pool, prefix) // creates the schema, drops it at the end
	open := func() (*session.Session, terms, layer.Claim) {
		b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		s, err := session.Open(ctxT(t), b, session.WithConfig(deadline.Config{}), session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		won := terms{won: make(chan *term.Term, 4), refused: make(chan error, 4)}
		c, err := layer.MustOf(s).Claim("leader", won)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c.Want(true) })
		return s, won, c
	}
	sa, wonA, ca := open()
	var ta *term.Term
	select {
	case ta = <-wonA.won:
	case <-time.After(10 * time.Second):
		t.Fatal("A won no term")
	}
	_, wonB, _ := open() // B attempts at once, fails, then polls every ≥ 2.5 s
	select {
	case err := <-wonB.refused:
		if err != nil {
			t.Fatalf("B's first attempt failed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B made no attempt")
	}
	poll := deadline.Config{}.WithDefaults().RenewInterval / 2
	layer.MustOf(sa).Do(func() { ca.Want(false); ca.Release(term.Stopped, nil) })
	start := time.Now()
	select {
	case tb := <-wonB.won:
		if tb.Token() <= ta.Token() {
			t.Fatalf("B's token %d, want > %d", tb.Token(), ta.Token())
		}
		if took := time.Since(start); took >= poll {
			t.Fatalf("handover took %v, no faster than a poll (%v): NOTIFY did not wake the candidate", took, poll)
		}
	case <-time.After(poll):
		t.Fatalf("B not elected within %v of the release: NOTIFY did not wake the candidate", poll)
	}
}
