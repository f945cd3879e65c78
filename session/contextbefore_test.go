package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// failRenew is a Backend decorator whose renewals fail while off is set.
type failRenew struct {
	session.Backend
	off atomic.Bool
}

func (f *failRenew) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if f.off.Load() {
		return driver.RenewReply{}, errors.New("cut off")
	}
	return f.Backend.Renew(ctx, req)
}

// A term's ContextBefore runs on the engine's clock: renewed, it does not
// end; once renewals fail it ends exactly margin before the local deadline,
// while the term is still valid (issue 25).
func TestTermContextBeforeEndsMarginBeforeTheLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &failRenew{Backend: b}
		s := openDecorated(t, d)
		r := &recorder{}
		c, err := layer.MustOf(s).Claim("a", r)
		if err != nil {
			t.Fatal(err)
		}
		layer.MustOf(s).Do(func() { c.Want(true) })
		synctest.Wait()
		if len(r.terms()) != 1 {
			t.Fatal("the lease was not won")
		}
		tm := r.terms()[0]
		const margin = 2 * time.Second
		ctx, cancel := tm.ContextBefore(margin)
		defer cancel()
		cfg := s.Config()
		advance(3 * cfg.LeaseDuration) // renewed all along
		if ctx.Err() != nil {
			t.Fatalf("ended while renewals kept the term alive: %v", context.Cause(ctx))
		}
		d.off.Store(true)
		start, rem := time.Now(), tm.Remaining()
		<-ctx.Done()
		if took := time.Since(start); took != rem-margin {
			t.Fatalf("ended %v after renewals stopped, want the remaining %v minus the margin %v", took, rem, margin)
		}
		if !errors.Is(context.Cause(ctx), term.ErrDeadlineNear) || !tm.Valid() {
			t.Fatalf("cause %v, term valid %v: want ErrDeadlineNear while still valid", context.Cause(ctx), tm.Valid())
		}
	})
}

// WithDeadlineWarning publishes TermDeadlineNear for each term once, at
// deadline - margin, while the terms are valid; never while renewals come
// in time; again after a renewal moved the deadline away and it comes
// near once more (issue 25).
func TestDeadlineWarningEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &failRenew{Backend: b}
		const margin = 2 * time.Second
		s, warnings := warningSession(t, d, margin)
		tm := win(t, s, "a")
		cfg := s.Config()
		advance(3 * cfg.LeaseDuration)
		if w := warnings(); len(w) != 0 {
			t.Fatalf("%d warnings while renewals came in time", len(w))
		}
		d.off.Store(true)
		start, rem := time.Now(), tm.Remaining()
		advance(rem - margin - time.Millisecond)
		if w := warnings(); len(w) != 0 {
			t.Fatalf("warned at %v after renewals stopped, before remaining %v - margin %v", w[0].Time.Sub(start), rem, margin)
		}
		advance(2 * time.Millisecond)
		w := warnings()
		if len(w) != 1 || w[0].Time.Sub(start) != rem-margin || w[0].Name != "a" || w[0].Token != tm.Token() || !tm.Valid() {
			t.Fatalf("warnings %+v: want one for a#%d at %v after renewals stopped, the term still valid", w, tm.Token(), rem-margin)
		}
		// A renewal gets through again: the deadline moves away, then comes
		// near a second time.
		d.off.Store(false)
		advance(cfg.RenewInterval)
		if !tm.Valid() {
			t.Fatal("the term ended although a renewal came in time")
		}
		d.off.Store(true)
		advance(cfg.LeaseDuration - margin)
		if w := warnings(); len(w) != 2 {
			t.Fatalf("%d warnings, want a second one after the deadline moved and came near again", len(w))
		}
	})
}

func TestDeadlineWarningMarginValidated(t *testing.T) {
	b, _ := memory.New()
	for _, m := range []time.Duration{-time.Second, 10 * time.Second, time.Minute} {
		if _, err := session.New(b, session.WithLogger(nil), session.WithDeadlineWarning(m)); err == nil || !strings.Contains(err.Error(), "LeaseDuration - RenewInterval") {
			t.Errorf("WithDeadlineWarning(%v) with the default timing: %v, want the rule", m, err)
		}
	}
}

// shortGrant is a Backend decorator that grants at most grant on Open and
// Renew, as a server that clamps the lease does.
type shortGrant struct {
	session.Backend
	grant time.Duration
	failRenew
}

func (g *shortGrant) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	r, err := g.Backend.Open(ctx, req)
	r.Remaining = min(r.Remaining, g.grant)
	return r, err
}

func (g *shortGrant) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if g.off.Load() {
		return driver.RenewReply{}, errors.New("cut off")
	}
	r, err := g.Backend.Renew(ctx, req)
	r.Remaining = min(r.Remaining, g.grant)
	return r, err
}

// A grant the backend shortened (renewals every third of it) leaves less
// room than the margin New checked against LeaseDuration: the warning must
// not fire before every healthy renewal, yet still come before the
// deadline once renewals stop (review of issue 25).
func TestDeadlineWarningOnAShortenedGrant(t *testing.T) {
	// Each margin is valid for the default timing (15 s lease, 5 s
	// renewals: below 10 s). 6 s grants renew every 2 s; 12 s grants every
	// 5 s, as full ones, but leave 6.8 s after the renewal is due; a full
	// grant leaves 9.8 s (drift and margin), less than 9.9 s.
	for _, c := range []struct{ grant, margin time.Duration }{
		{6 * time.Second, 5 * time.Second},
		{12 * time.Second, 9 * time.Second},
		{15 * time.Second, 9900 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("grant %v margin %v", c.grant, c.margin), func(t *testing.T) {
			deadlineWarningOnAShortenedGrant(t, c.grant, c.margin)
		})
	}
}

func deadlineWarningOnAShortenedGrant(t *testing.T, grant, margin time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &shortGrant{Backend: b, grant: grant}
		s, warnings := warningSession(t, d, margin)
		tm := win(t, s, "a")
		advance(60 * time.Second) // renewed all along
		if w := warnings(); len(w) != 0 || !tm.Valid() {
			t.Fatalf("%d warnings while renewals of the shortened grant came in time (term valid %v)", len(w), tm.Valid())
		}
		d.off.Store(true)
		rem := tm.Remaining()
		advance(rem - time.Millisecond)
		w := warnings()
		if len(w) != 1 || !tm.Valid() || w[0].Remaining <= 0 {
			t.Fatalf("warnings %+v after renewals stopped: want one while the term is still valid", w)
		}
	})
}

// hangRenew is a Backend decorator whose renewals hang until their call
// times out while hang is set: the session stays LIVE meanwhile.
type hangRenew struct {
	session.Backend
	hang atomic.Bool
}

func (h *hangRenew) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return driver.RenewReply{}, ctx.Err()
	}
	return h.Backend.Renew(ctx, req)
}

// A term won after the session's warning was published, while the
// deadline is already within the margin, gets its own TermDeadlineNear:
// the warning is per term (review of issue 25).
func TestDeadlineWarningForATermWonInsideTheMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &hangRenew{Backend: b}
		const margin = 9 * time.Second // default timing: 15 s lease, 5 s renewals
		s, warnings := warningSession(t, d, margin)
		win(t, s, "a")
		d.hang.Store(true)
		for i := 0; len(warnings()) == 0 && i < 200; i++ {
			advance(50 * time.Millisecond)
		}
		if w := warnings(); len(w) != 1 || w[0].Name != "a" || s.State() != session.Live {
			t.Fatalf("warnings %+v, state %v: want one for a while the session is still LIVE", w, s.State())
		}
		tb := win(t, s, "b")
		w := warnings()
		if len(w) != 2 || w[1].Name != "b" || w[1].Token != tb.Token() || !tb.Valid() {
			t.Fatalf("warnings %+v: want a second one for b#%d, won with its deadline already within the margin", w, tb.Token())
		}
	})
}

// countHandler counts the log records of one message.
type countHandler struct {
	mu    sync.Mutex
	msg   string
	n     int
	terms int64
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.msg {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "terms" {
			h.terms = a.Value.Int64()
		}
		return true
	})
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// A session of many terms (a group's partitions, a Locker's runs) logs
// one WARN line per late renewal naming how many terms it concerns, not
// one per term; listeners still get one event per term (review of issue
// 25).
func TestDeadlineWarningLogsOnceForManyTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New()
		d := &failRenew{Backend: b}
		h := &countHandler{msg: "simba: TermDeadlineNear"}
		var events atomic.Int64
		s, err := session.New(d, session.WithLogger(slog.New(h)), session.WithDeadlineWarning(2*time.Second),
			session.WithListener(func(e session.Event) {
				if e.Kind == session.TermDeadlineNear {
					events.Add(1)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		synctest.Wait()
		const terms = 50
		for i := range terms {
			c, err := layer.MustOf(s).Claim(fmt.Sprintf("p%d", i), &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			layer.MustOf(s).Do(func() { c.Want(true) })
		}
		synctest.Wait()
		d.off.Store(true)
		advance(s.Config().LeaseDuration - time.Second)
		h.mu.Lock()
		defer h.mu.Unlock()
		if events.Load() != terms || h.n != 1 || h.terms != terms {
			t.Fatalf("%d events, %d log lines (terms=%d): want %d events and one line with terms=%d", events.Load(), h.n, h.terms, terms, terms)
		}
	})
}

// warningSession opens a session on b with WithDeadlineWarning(margin),
// closed when t ends, and returns it with a function that reads the
// TermDeadlineNear events published so far. Inside a synctest bubble.
func warningSession(t *testing.T, b session.Backend, margin time.Duration) (*session.Session, func() []session.Event) {
	t.Helper()
	var (
		mu   sync.Mutex
		near []session.Event
	)
	s, err := session.New(b, session.WithLogger(nil), session.WithDeadlineWarning(margin),
		session.WithListener(func(e session.Event) {
			if e.Kind == session.TermDeadlineNear {
				mu.Lock()
				near = append(near, e)
				mu.Unlock()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	synctest.Wait()
	return s, func() []session.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]session.Event(nil), near...)
	}
}

// win claims name on s and returns the term it won at once, failing t if
// it did not. Inside a synctest bubble.
func win(t *testing.T, s *session.Session, name string) *term.Term {
	t.Helper()
	r := &recorder{}
	c, err := layer.MustOf(s).Claim(name, r)
	if err != nil {
		t.Fatal(err)
	}
	layer.MustOf(s).Do(func() { c.Want(true) })
	synctest.Wait()
	if len(r.terms()) != 1 {
		t.Fatalf("%s was not won (state %v)", name, s.State())
	}
	return r.terms()[0]
}
