package session_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// The defects an independent review of the core found (issue 9), each
// with a test that failed before its fix.

// Defect 1: a renewal reply that leaves out a lease revokes its term
// (TAKEN_OVER); the claim competes again and the backend answers "already
// yours, token T". A second Term with the same T must never be made: a
// later term's token exceeds every earlier one.
func TestTermAfterTakenOverNeverReusesTheToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &dropLease{Backend: b}
		s := openDecorated(t, d)
		r := &recorder{}
		c, _ := layer.MustOf(s).Claim("a", r)
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		d.mu.Lock()
		d.drop = "a"
		d.mu.Unlock()
		advance(5*time.Second + time.Millisecond) // the renewal leaves "a" out
		d.mu.Lock()
		d.drop = ""
		d.mu.Unlock()
		advance(30 * time.Second)
		ts := r.terms()
		if len(ts) < 2 {
			t.Fatalf("%d terms, want the taken-over term and a later one", len(ts))
		}
		for i := 1; i < len(ts); i++ {
			if ts[i].Token() <= ts[i-1].Token() {
				t.Fatalf("term %d has token %d after a term with token %d: tokens must rise", i, ts[i].Token(), ts[i-1].Token())
			}
		}
		if !ts[len(ts)-1].Valid() {
			t.Fatal("the last term is not valid: the name was never won back")
		}
	})
}

// liar answers renewals (and opens, once asked) with a remaining time no
// backend may grant.
type liar struct {
	session.Backend
	mu         sync.Mutex
	renew      *time.Duration // nil: tell the truth
	open       *time.Duration
	openCalls  int
	renewCalls int
}

func (l *liar) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	r, err := l.Backend.Open(ctx, req)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.openCalls++
	if l.open != nil && l.openCalls == 1 {
		r.Remaining = *l.open
	}
	return r, err
}

func (l *liar) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := l.Backend.Renew(ctx, req)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewCalls++
	if l.renew != nil {
		r.Remaining = *l.renew
	}
	return r, err
}

// Defect 2: a lying backend can extend a deadline without bound. A grant
// outside [0, lease asked] is a failed call, logged as a contract
// violation, never a longer life: the local deadline passes one lease
// after the last honest grant.
func TestImpossibleGrantIsAFailedCallNotALongerLife(t *testing.T) {
	for _, lie := range []time.Duration{math.MinInt64, -time.Second, math.MaxInt64, time.Hour} {
		t.Run(lie.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := memory.New()
				l := &liar{Backend: b}
				ev := &events{}
				s, err := session.Open(context.Background(), l, session.WithListener(ev.listen), session.WithLogger(nil))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				cfg := s.Config()
				r := &recorder{}
				c, _ := layer.MustOf(s).Claim("a", r)
				layer.MustOf(s).Do(func() { c.Want(true) })
				synctest.Wait()
				tm := r.terms()[0]
				l.mu.Lock()
				l.renew = &lie
				l.mu.Unlock()
				for range 20 {
					advance(time.Second)
					if rem := tm.Remaining(); rem > cfg.Validity(cfg.LeaseDuration) {
						t.Fatalf("a grant of %v gave the term %v, more than a full lease's validity", lie, rem)
					}
				}
				if tm.Valid() {
					t.Fatalf("20s after the backend started answering %v, the term is still valid", lie)
				}
				if got := ev.count(session.BackendContractViolation); got == 0 {
					t.Fatal("no BackendContractViolation event")
				}
				e, _ := ev.last(session.BackendContractViolation)
				if !errors.Is(e.Err, session.ErrContractViolation) {
					t.Fatalf("event Err = %v, want ErrContractViolation", e.Err)
				}
			})
		})
	}
}

// Defect 2, Open: an impossible grant from Open is a failed attempt too.
func TestImpossibleOpenGrantIsAFailedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		huge := time.Duration(math.MaxInt64)
		l := &liar{Backend: b, open: &huge}
		s, err := session.Open(context.Background(), l, session.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if rem := s.Remaining(); rem > s.Config().Validity(s.Config().LeaseDuration) {
			t.Fatalf("Remaining() = %v after a lying Open", rem)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.openCalls < 2 {
			t.Fatalf("%d Open calls: the lying grant was used", l.openCalls)
		}
	})
}

// mangle rewrites acquisition replies, once.
type mangle struct {
	*memory.Backend
	mu     sync.Mutex
	fn     func(driver.AcquireReply) driver.AcquireReply
	tokens []uint64 // tokens in the mangled reply
}

func (m *mangle) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := m.Backend.Acquire(ctx, req)
	m.mu.Lock()
	fn := m.fn
	m.fn = nil
	m.mu.Unlock()
	if fn != nil && err == nil {
		r = fn(r)
		m.mu.Lock()
		for _, res := range r.Results {
			m.tokens = append(m.tokens, res.Token)
		}
		m.mu.Unlock()
	}
	return r, err
}

// Defect 6: an Acquire reply that omits a name stranded that claim until
// the backend session ended. A missing, duplicated or foreign result is a
// refusal for this tick; the claim competes again on the next.
func TestMalformedAcquireReplyIsARefusalForThisTick(t *testing.T) {
	for name, fn := range map[string]func(driver.AcquireReply) driver.AcquireReply{
		"missing": func(driver.AcquireReply) driver.AcquireReply { return driver.AcquireReply{} },
		"duplicated": func(r driver.AcquireReply) driver.AcquireReply {
			r.Results = append(r.Results, r.Results...)
			return r
		},
		"foreign": func(r driver.AcquireReply) driver.AcquireReply {
			r.Results[0].Name = "other"
			return r
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := memory.New()
				m := &mangle{Backend: b, fn: fn}
				ev := &events{}
				s, err := session.Open(context.Background(), m, session.WithListener(ev.listen), session.WithLogger(nil))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				r := &recorder{}
				c, _ := layer.MustOf(s).Claim("a", r)
				layer.MustOf(s).Do(func() { c.Want(true) })
				synctest.Wait()
				m.mu.Lock()
				for _, tm := range r.terms() {
					for _, tok := range m.tokens {
						if tm.Token() == tok {
							t.Fatalf("term %v made from a malformed reply", tm)
						}
					}
				}
				m.mu.Unlock()
				r.mu.Lock()
				refused := len(r.refuse)
				r.mu.Unlock()
				if refused != 1 {
					t.Fatalf("%d refusals, want the malformed reply reported as one", refused)
				}
				if ev.count(session.BackendContractViolation) == 0 {
					t.Fatal("no BackendContractViolation event")
				}
				advance(30 * time.Second)
				ts := r.terms()
				if len(ts) != 1 || !ts[0].Valid() {
					t.Fatalf("%d terms after the next ticks, want one valid term", len(ts))
				}
			})
		})
	}
}

// Defect 10: ID() returned the old id after Close; the doc says empty.
func TestIDIsEmptyAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, deadline.Config{})
		if f.s.ID() == "" {
			t.Fatal("no ID while LIVE")
		}
		if err := f.s.Close(); err != nil {
			t.Fatal(err)
		}
		if id := f.s.ID(); id != "" {
			t.Fatalf("ID() = %q after Close, want empty", id)
		}
		if rem := f.s.Remaining(); rem != 0 {
			t.Fatalf("Remaining() = %v after Close, want 0", rem)
		}
	})
}

var _ = term.Stopped

// A reply to an abandoned attempt is released even while the claim still
// wants the lease: only the current attempt's reply makes a term. (Found
// by the mutation gate: the tests let the claim stop wanting first, and
// the other rules - released tokens, rising tokens - then hid it.)
func TestLateReplyIsReleasedEvenWhileStillWanted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		// Renewals never list the lease, so no renewal releases it before
		// the late reply arrives: only the attempt rule stands in the way.
		slow := &dropLease{Backend: &slowAcquire{Backend: b, delay: 6 * time.Second}, drop: "jobs"}
		s := openDecorated(t, slow)
		r := &recorder{}
		c, _ := layer.MustOf(s).Claim("jobs", r)
		layer.MustOf(s).Do(func() { c.Want(true) })
		advance(30 * time.Second) // every attempt times out; its reply comes later
		if n := len(r.terms()); n != 0 {
			t.Fatalf("%d terms made from replies that came after their attempt timed out", n)
		}
		layer.MustOf(s).Do(func() { c.Want(false) })
		advance(10 * time.Second)
		if id, tok, ok := b.Owner("jobs"); ok {
			t.Fatalf("a lease won by a late reply was not released: owned by %s under %d", id, tok)
		}
	})
}
