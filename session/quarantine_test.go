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

// The data-loss quarantine (ADR 0130), engine side: the backend announces
// it in AcquireReply.Quarantine; the engine publishes it once, refuses the
// names with an error wrapping ErrQuarantined, refuses (and releases) a
// grant the same reply makes, and never lets it lengthen a term.

// One BackendQuarantined event per quarantine, however many refused ticks
// it lasts; the refusals wrap ErrQuarantined; a later quarantine is a new
// event; after it ends the name is won with a higher token.
func TestQuarantineIsOneEventAndRefusesWithErrQuarantined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := deadline.DefaultLeaseDuration
		f := newFixture(t, deadline.Config{}, memory.WithMaxLease(lease))
		_, r := f.claim("a")
		first := r.terms()[0]
		for loss := 1; loss <= 2; loss++ {
			f.b.LoseData(false)
			advance(lease) // the renewal answers ErrExpired, the session reopens, the claim competes
			if first.Valid() {
				t.Fatalf("loss %d: the term from before the loss is still valid one lease later", loss)
			}
			if len(r.terms()) != loss {
				t.Fatalf("loss %d: %d terms one lease after the loss, want %d: a quarantine grants nothing", loss, len(r.terms()), loss)
			}
			if got := f.ev.count(session.BackendQuarantined); got != loss {
				t.Fatalf("loss %d: %d BackendQuarantined events, want %d: one per quarantine, not per refused tick", loss, got, loss)
			}
			e, _ := f.ev.last(session.BackendQuarantined)
			if !errors.Is(e.Err, session.ErrQuarantined) || e.Remaining <= 0 || e.Remaining > lease {
				t.Fatalf("loss %d: event Err %v Remaining %v, want ErrQuarantined and (0, %v]", loss, e.Err, e.Remaining, lease)
			}
			r.mu.Lock()
			refusals := append([]error(nil), r.refuse...)
			r.mu.Unlock()
			if len(refusals) < 2 {
				t.Fatalf("loss %d: %d refusals, want one per tick of the quarantine", loss, len(refusals))
			}
			for _, err := range refusals {
				if !errors.Is(err, session.ErrQuarantined) {
					t.Fatalf("loss %d: refusal %v does not wrap ErrQuarantined", loss, err)
				}
			}
			advance(lease)
			ts := r.terms()
			if len(ts) != loss+1 || !ts[loss].Valid() {
				t.Fatalf("loss %d: %d terms after the quarantine, want %d, the last valid", loss, len(ts), loss+1)
			}
			if ts[loss].Token() <= ts[loss-1].Token() {
				t.Fatalf("loss %d: token %d after %d", loss, ts[loss].Token(), ts[loss-1].Token())
			}
			if got := f.ev.count(session.BackendQuarantined); got != loss {
				t.Fatalf("loss %d: %d BackendQuarantined events after the quarantine, want %d", loss, got, loss)
			}
			first = ts[loss]
			r.mu.Lock()
			r.refuse = nil
			r.mu.Unlock()
		}
	})
}

// A grant inside a quarantine the same reply announces makes no sense: it
// is a contract violation, no term is made, and the lease is released by
// its token so that the name is free again.
func TestGrantInsideAnnouncedQuarantineIsAViolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		m := &mangle{Backend: b, fn: func(r driver.AcquireReply) driver.AcquireReply {
			r.Quarantine = 10 * time.Second
			return r
		}}
		ev := &events{}
		s := openListened(t, m, ev)
		r := claimOn(t, s, "a")
		m.mu.Lock()
		granted := m.tokens
		m.mu.Unlock()
		if len(granted) != 1 || granted[0] == 0 {
			t.Fatalf("mangled reply tokens %v, want one grant", granted)
		}
		// The release broadcasts the name, which makes the claim try again
		// at once, honestly: a term may follow, but never with the token
		// of the grant the quarantine voided.
		if ts := r.terms(); len(ts) > 1 || len(ts) == 1 && ts[0].Token() <= granted[0] {
			t.Fatalf("terms %v from a reply that announced a quarantine with token %d: want none with that token", ts, granted[0])
		}
		if ev.count(session.BackendContractViolation) != 1 {
			t.Fatalf("%d BackendContractViolation events, want 1", ev.count(session.BackendContractViolation))
		}
		if e, _ := ev.last(session.BackendContractViolation); !errors.Is(e.Err, session.ErrContractViolation) {
			t.Fatalf("violation Err = %v", e.Err)
		}
		if _, tok, ok := b.Owner("a"); ok && tok == granted[0] {
			t.Fatalf("the lease granted during the quarantine is still held (token %d): it is released by token", tok)
		}
		advance(10 * time.Second)
		ts := r.terms()
		if len(ts) != 1 || !ts[0].Valid() || ts[0].Token() <= granted[0] {
			t.Fatalf("after the lie: terms %v, want one valid term with a token above %d", ts, granted[0])
		}
	})
}

// A negative or huge Quarantine never lengthens a term: a term held while
// such replies arrive for another name still ends one validity after its
// last renewal. A negative one announces nothing (the grant stands); a
// huge one refuses, and its refusal says so.
func TestQuarantineNeverLengthensATerm(t *testing.T) {
	for _, q := range []time.Duration{math.MinInt64, -time.Second, math.MaxInt64, 1000 * time.Hour} {
		t.Run(q.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := memory.New()
				m := &mangle{Backend: b}
				ev := &events{}
				s := openListened(t, m, ev)
				cfg := s.Config()
				ra := claimOn(t, s, "a")
				ta := ra.terms()[0]
				m.mu.Lock()
				m.fn = func(r driver.AcquireReply) driver.AcquireReply { r.Quarantine = q; return r }
				m.mu.Unlock()
				rb := claimOn(t, s, "b")
				if rem := ta.Remaining(); rem > cfg.Validity(cfg.LeaseDuration) {
					t.Fatalf("term a: Remaining %v after a Quarantine of %v, more than a lease's validity", rem, q)
				}
				if q > 0 {
					m.mu.Lock()
					lied := m.tokens[0]
					m.mu.Unlock()
					for _, tb := range rb.terms() {
						if tb.Token() <= lied {
							t.Fatalf("b won with token %d from a reply announcing a quarantine of %v", tb.Token(), q)
						}
					}
					if ev.count(session.BackendQuarantined) != 1 {
						t.Fatalf("%d BackendQuarantined events, want 1", ev.count(session.BackendQuarantined))
					}
				} else if len(rb.terms()) != 1 || ev.count(session.BackendQuarantined) != 0 {
					t.Fatalf("Quarantine %v: b has %d terms and %d BackendQuarantined events, want 1 and 0: a negative quarantine announces nothing",
						q, len(rb.terms()), ev.count(session.BackendQuarantined))
				}
				b.FailCalls(errors.New("down")) // no more renewals: a ends on its deadline
				advance(cfg.Validity(cfg.LeaseDuration))
				if ta.Valid() {
					t.Fatalf("term a still valid one lease's validity after its last renewal (Quarantine %v)", q)
				}
				if ta.Reason() != term.DeadlinePassed {
					t.Fatalf("term a ended with %v, want %v", ta.Reason(), term.DeadlinePassed)
				}
			})
		})
	}
}

// openListened opens a session on b whose events go to ev.
func openListened(t *testing.T, b session.Backend, ev *events) *session.Session {
	t.Helper()
	s, err := session.Open(t.Context(), b, session.WithListener(ev.listen), session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	synctest.Wait()
	return s
}

// claimOn claims name on s, wanted, and waits until the engine is idle.
func claimOn(t *testing.T, s *session.Session, name string) *recorder {
	t.Helper()
	r := &recorder{}
	c, err := layer.MustOf(s).Claim(name, r)
	if err != nil {
		t.Fatalf("Claim(%q): %v", name, err)
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	synctest.Wait()
	return r
}

// lateFirstAcquire makes the first Acquire take effect, then loses the
// backend's data, and answers only after the engine's call timeout: a late
// reply from before the loss, announcing no quarantine, that arrives while
// the quarantine is on.
type lateFirstAcquire struct {
	*memory.Backend
	mu    sync.Mutex
	calls int
}

func (l *lateFirstAcquire) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	l.mu.Lock()
	l.calls++
	first := l.calls == 1
	l.mu.Unlock()
	if !first {
		return l.Backend.Acquire(ctx, req)
	}
	r, err := l.Backend.Acquire(context.Background(), req)
	l.LoseData(false)
	<-time.After(7 * time.Second) // past the call timeout (the renewal period)
	return r, err
}

// A late reply of an abandoned attempt is old news: it neither ends the
// quarantine the current replies announce (which would publish a second
// BackendQuarantined for the same quarantine) nor starts one.
func TestLateReplyDoesNotRestartTheQuarantineEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := deadline.DefaultLeaseDuration
		b, _ := memory.New(memory.WithMaxLease(lease))
		l := &lateFirstAcquire{Backend: b}
		ev := &events{}
		s := openListened(t, l, ev)
		r := claimOn(t, s, "a")
		advance(3 * lease)
		if got := ev.count(session.BackendQuarantined); got != 1 {
			t.Fatalf("%d BackendQuarantined events for one quarantine, want 1", got)
		}
		if ts := r.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatalf("terms %v after the quarantine, want one valid", ts)
		}
	})
}

// lateLyingAcquire makes the first Acquire take effect at once but answer
// only when the test closes answer (long past the engine's call timeout),
// announcing a quarantine beside the grant it made: a lying late reply,
// whose token the session's next attempt was meanwhile given back as its
// own lease. The test picks the instant the reply arrives, so it never
// races a renewal.
type lateLyingAcquire struct {
	*memory.Backend
	answer  chan struct{}
	mu      sync.Mutex
	calls   int
	granted uint64 // the token the first Acquire granted
}

func (l *lateLyingAcquire) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	l.mu.Lock()
	l.calls++
	first := l.calls == 1
	l.mu.Unlock()
	if !first {
		return l.Backend.Acquire(ctx, req)
	}
	r, err := l.Backend.Acquire(context.Background(), req)
	l.mu.Lock()
	if len(r.Results) == 1 {
		l.granted = r.Results[0].Token
	}
	l.mu.Unlock()
	<-l.answer
	r.Quarantine = 10 * time.Second
	return r, err
}

// A grant inside an announced quarantine is released by token, except
// when that token is the lease a live term of the session holds: here a
// late reply of an abandoned attempt carries the token the next attempt
// made a term of. Releasing it would free the lease under that term, and
// another node could take the name while the term is still valid.
//
// Deterministic, on virtual time with no two events at one instant: the
// retry jitter is 1ms, so the first attempt (0.5s) times out at 5.5s,
// after the renewal at 5s that saw it still in flight, and the retry
// (2.5s later, 8s) is given the hung call's lease back, token and all,
// before the renewal at 10s could have released it as unknown. The late
// reply is let through at 9.5s, when every goroutine of the bubble is
// idle and nothing is due, so whatever the engine does with it (a
// release, with the mutation quarantine-violation-releases-live-term) is
// complete before the next renewal could confirm or re-acquire anything.
func TestLyingLateGrantDoesNotReleaseALiveTermsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := deadline.DefaultLeaseDuration
		b, _ := memory.New(memory.WithMaxLease(lease))
		l := &lateLyingAcquire{Backend: b, answer: make(chan struct{})}
		var once sync.Once
		answer := func() { once.Do(func() { close(l.answer) }) }
		ev := &events{}
		s, err := session.Open(t.Context(), l, session.WithListener(ev.listen), session.WithLogger(nil),
			session.WithConfig(deadline.Config{RetryJitter: time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		t.Cleanup(answer)               // runs before the Close: a failed check must not leave the call hanging
		advance(500 * time.Millisecond) // off the renewals' instants
		r := claimOn(t, s, "a")
		// The first attempt times out; a later one is given the same lease
		// back and makes a term of it.
		var live *term.Term
		for range 2 * int(lease/time.Second) {
			advance(time.Second)
			if ts := r.terms(); len(ts) > 0 {
				live = ts[0]
				break
			}
		}
		if live == nil || !live.Valid() {
			t.Fatalf("terms %v while the first attempt hangs, want one valid term (made by a later attempt)", r.terms())
		}
		l.mu.Lock()
		granted := l.granted
		l.mu.Unlock()
		if live.Token() != granted {
			t.Fatalf("the live term has token %d, the hung call granted %d: the test needs them equal (the late reply's grant is the live term's lease)", live.Token(), granted)
		}
		advance(time.Second) // well inside the term, between two renewals
		if _, tok, ok := b.Owner("a"); !ok || tok != live.Token() {
			t.Fatalf("backend owner of a before the late reply: token %d held %v, want the live term's %d", tok, ok, live.Token())
		}

		answer() // the late lying reply arrives; nothing else is due
		synctest.Wait()
		if ev.count(session.BackendContractViolation) == 0 {
			t.Fatal("no BackendContractViolation for a grant inside the quarantine the same reply announces")
		}
		if ts := r.terms(); len(ts) != 1 || !ts[0].Valid() {
			t.Fatalf("terms %v after the late reply, want the one valid term %v", ts, live)
		}
		if _, tok, ok := b.Owner("a"); !ok || tok != live.Token() {
			t.Fatalf("backend owner of a: token %d held %v, want the live term's %d still held: the lie released the lease under a valid term", tok, ok, live.Token())
		}
	})
}
