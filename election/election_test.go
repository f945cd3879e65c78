package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// advance lets d of virtual time pass (inside a synctest bubble) and waits
// until every goroutine is idle.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// log is a shared, ordered record of what happened across nodes.
type log struct {
	mu    sync.Mutex
	lines []string
}

func (l *log) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *log) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *log) index(line string) int {
	for i, s := range l.all() {
		if s == line {
			return i
		}
	}
	return -1
}

// listener records callbacks of one node into the shared log.
func listener(l *log, node string) election.Listener {
	return election.Funcs{
		Elected: func(t *term.Term) { l.add("%s elected %d", node, t.Token()) },
		Revoked: func(t *term.Term, r term.RevokeReason) { l.add("%s revoked %d %s", node, t.Token(), r.String()) },
	}
}

func newBackend(t *testing.T) *memory.Backend {
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func open(t *testing.T, b session.Backend) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func start(t *testing.T, s *session.Session, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.Start(s, name, opts...)
	if err != nil {
		t.Fatalf("Start(%q): %v", name, err)
	}
	synctest.Wait()
	return e
}

func TestLeaderAndCandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		a := start(t, open(t, b), "jobs", election.WithListener(listener(&l, "a")))
		bb := start(t, open(t, b.NewClient()), "jobs", election.WithListener(listener(&l, "b")))
		if a.Status() != election.Leader || bb.Status() != election.Candidate {
			t.Fatalf("statuses %v %v, want LEADER CANDIDATE", a.Status(), bb.Status())
		}
		tm := a.Term()
		if tm == nil || !tm.Valid() || tm.Token() == 0 || bb.Term() != nil {
			t.Fatal("want a valid term on a and none on b")
		}
		if got := l.all(); len(got) != 1 || got[0] != fmt.Sprintf("a elected %d", tm.Token()) {
			t.Fatalf("callbacks = %v", got)
		}
		if _, err := election.Start(a.Session(), "jobs"); !errors.Is(err, election.ErrAlreadyStarted) {
			t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
		}
		snap := a.Session().Snapshot()
		if len(snap.Entries) != 1 || snap.Entries[0].Kind != "election" || snap.Entries[0].Status != "LEADER" {
			t.Fatalf("snapshot entries = %+v", snap.Entries)
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if bb.Status() != election.Leader || a.Status() != election.Stopped {
			t.Fatalf("after a stopped: %v %v, want STOPPED LEADER", a.Status(), bb.Status())
		}
		if bb.Term().Token() <= tm.Token() {
			t.Fatal("the next term's token is not higher")
		}
	})
}

func TestVoluntaryHandoverOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		task := func(node string) election.Task {
			return func(ctx context.Context, tm *term.Term) error {
				l.add("%s task start", node)
				<-ctx.Done()
				l.add("%s task cancelled %v", node, context.Cause(ctx))
				<-time.After(2 * time.Second) // the task takes a while to wind down
				l.add("%s task returned", node)
				return nil
			}
		}
		sa := open(t, b)
		a := start(t, sa, "jobs", election.WithListener(listener(&l, "a")), election.RunWhileLeader(task("a")))
		start(t, open(t, b.NewClient()), "jobs", election.WithListener(listener(&l, "b")), election.RunWhileLeader(task("b")))
		tm := a.Term()
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want := []string{
			fmt.Sprintf("a elected %d", tm.Token()),
			"a task start",
			"a task cancelled simba: term revoked: STOPPED",
			"a task returned",
			fmt.Sprintf("a revoked %d STOPPED", tm.Token()),
		}
		got := l.all()
		var gotA []string // a's own order; b's lines may interleave after the release
		for _, s := range got {
			if s[0] == 'a' {
				gotA = append(gotA, s)
			}
		}
		if fmt.Sprint(gotA) != fmt.Sprint(want) {
			t.Fatalf("a's timeline = %q, want %q", gotA, want)
		}
		// b became leader only after a's task returned (the lease was held
		// until then), and a's OnRevoked ran before Stop returned.
		bElected := -1
		for i, s := range got {
			if len(s) > 10 && s[:10] == "b elected " {
				bElected = i
			}
		}
		if bElected < l.index("a task returned") {
			t.Fatalf("b elected at %d, before a's task returned at %d: %q", bElected, l.index("a task returned"), got)
		}
		if _, _, ok := b.Owner("jobs"); !ok {
			t.Fatal("nobody owns the lease after the handover")
		}
	})
}

func TestHandoverWaitsAtMostTheTermsRemainingTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		stuck := make(chan struct{})
		defer close(stuck)
		s := open(t, b)
		a := start(t, s, "jobs", election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stuck // ignores cancellation
			return nil
		}))
		remaining := a.Term().Remaining()
		begin := time.Now()
		done := make(chan error, 1)
		go func() { done <- a.Stop(context.Background()) }()
		advance(remaining - time.Millisecond)
		if _, _, ok := b.Owner("jobs"); !ok {
			t.Fatal("lease released before the task returned or the deadline passed")
		}
		advance(2 * time.Millisecond)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute): // the session renews on: waiting would never end
			t.Fatal("Stop still waits for the task after the term's remaining time passed")
		}
		if waited := time.Since(begin); waited < remaining || waited > remaining+time.Millisecond {
			t.Fatalf("Stop waited %v, want the term's remaining %v", waited, remaining)
		}
		if _, _, ok := b.Owner("jobs"); ok {
			t.Fatal("lease still held after the bound passed")
		}
	})
}

func TestInvoluntaryLossDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		stuck := make(chan struct{})
		defer close(stuck)
		s := open(t, b)
		a := start(t, s, "jobs", election.WithListener(listener(&l, "a")), election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stuck
			return nil
		}))
		tm := a.Term()
		b.Expire(s.ID())
		advance(5*time.Second + time.Millisecond) // the renewal learns of the expiry
		if tm.Valid() || tm.Reason() != term.SessionExpired {
			t.Fatalf("term: Valid %v Reason %v, want false SESSION_EXPIRED", tm.Valid(), tm.Reason())
		}
		if i := l.index(fmt.Sprintf("a revoked %d SESSION_EXPIRED", tm.Token())); i < 0 {
			t.Fatalf("OnRevoked not delivered at once although the task is still running: %q", l.all())
		}
		// Back to CANDIDATE, and leader again under the new session.
		if a.Status() != election.Leader || a.Term() == nil || a.Term().Token() <= tm.Token() {
			t.Fatalf("status %v, want LEADER again with a higher token", a.Status())
		}
	})
}

func TestStepDownCooldown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		a := start(t, open(t, b), "jobs")
		if err := a.StepDown(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a.Status() != election.Cooldown || a.Term() != nil {
			t.Fatalf("after StepDown: %v, want COOLDOWN without a term", a.Status())
		}
		advance(20*time.Second - time.Millisecond)
		if a.Status() != election.Cooldown {
			t.Fatalf("before the cooldown ended: %v, want COOLDOWN", a.Status())
		}
		if _, _, ok := b.Owner("jobs"); ok {
			t.Fatal("acquired during the cooldown")
		}
		advance(2 * time.Millisecond)
		if a.Status() != election.Leader {
			t.Fatalf("after the cooldown: %v, want LEADER (it attempts at once)", a.Status())
		}
	})
}

func TestStopFromCallbackDoesNotDeadlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		exec election.Executor
	}{{"goroutines", election.Goroutines{}}, {"direct", election.Direct{}}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				var e *election.Election
				var mu sync.Mutex
				var stopErr, closeErr error
				var revoked []term.RevokeReason
				ready := make(chan struct{})
				e = start(t, open(t, b), "jobs", election.WithExecutor(tc.exec), election.WithListener(election.Funcs{
					Elected: func(tm *term.Term) {
						<-ready
						err := e.Stop(tm.Context())
						err2 := e.Close()
						mu.Lock()
						stopErr, closeErr = err, err2
						mu.Unlock()
					},
					Revoked: func(_ *term.Term, r term.RevokeReason) {
						mu.Lock()
						revoked = append(revoked, r)
						mu.Unlock()
					},
				}))
				close(ready)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if !errors.Is(stopErr, election.ErrWouldBlockSelf) || !errors.Is(closeErr, election.ErrWouldBlockSelf) {
					t.Fatalf("Stop/Close from OnElected = %v / %v, want ErrWouldBlockSelf", stopErr, closeErr)
				}
				if len(revoked) != 1 || revoked[0] != term.Stopped || e.Status() != election.Stopped {
					t.Fatalf("revoked %v status %v, want [STOPPED] STOPPED", revoked, e.Status())
				}
			})
		})
	}
}

func TestRefusedOnElectedStepsDownWithoutCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var calls sync.Map
		refusing := election.ExecutorFunc(func(func()) error { return errors.New("pool saturated") })
		var taskRan bool
		var refusedErr error
		e := start(t, open(t, b), "jobs",
			election.WithExecutor(refusing),
			election.OnRefused(func(err error) { refusedErr = err }),
			election.WithListener(election.Funcs{
				Elected: func(*term.Term) { calls.Store("elected", true) },
				Revoked: func(*term.Term, term.RevokeReason) { calls.Store("revoked", true) },
			}),
			election.RunWhileLeader(func(context.Context, *term.Term) error { taskRan = true; return nil }))
		if e.Status() != election.Cooldown {
			t.Fatalf("status %v, want COOLDOWN after a refused OnElected", e.Status())
		}
		if !errors.Is(refusedErr, election.ErrRefused) {
			t.Fatalf("refusal = %v, want ErrRefused", refusedErr)
		}
		if _, _, ok := b.Owner("jobs"); ok {
			t.Fatal("the lease of the refused term was not released")
		}
		attempts := b.Stats().Acquire
		advance(15*time.Second - time.Millisecond) // one lease duration
		if e.Status() != election.Cooldown || b.Stats().Acquire != attempts {
			t.Fatalf("status %v, %d attempts before one lease duration, want COOLDOWN and none", e.Status(), b.Stats().Acquire-attempts)
		}
		advance(2 * time.Millisecond)
		// It competes again (and, the executor still refusing, cools down again).
		if b.Stats().Acquire != attempts+1 {
			t.Fatalf("%d attempts right after one lease duration, want 1", b.Stats().Acquire-attempts)
		}
		if _, ok := calls.Load("revoked"); ok || taskRan {
			t.Fatal("OnRevoked delivered or task started for a refused term")
		}
		if _, ok := calls.Load("elected"); ok {
			t.Fatal("OnElected ran although refused")
		}
	})
}

func TestCallbacksArePairedSerialAndNothingAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		s := open(t, b)
		var mu sync.Mutex
		inside, overlaps := 0, 0
		var seq []string
		slow := func(what string, tm *term.Term) {
			mu.Lock()
			inside++
			if inside > 1 {
				overlaps++
			}
			seq = append(seq, fmt.Sprintf("%s %d", what, tm.Token()))
			mu.Unlock()
			<-time.After(time.Second) // a slow callback
			mu.Lock()
			inside--
			mu.Unlock()
		}
		e := start(t, s, "jobs", election.WithListener(election.Funcs{
			Elected: func(tm *term.Term) { slow("elected", tm) },
			Revoked: func(tm *term.Term, _ term.RevokeReason) { slow("revoked", tm) },
		}))
		// Lose the term three times in a row by expiring the session.
		for range 3 {
			b.Expire(s.ID())
			advance(6 * time.Second)
		}
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(seq)
		mu.Unlock()
		advance(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if len(seq) != n {
			t.Fatalf("callbacks after Stop completed: %q", seq[n:])
		}
		if overlaps != 0 {
			t.Fatalf("%d callbacks overlapped", overlaps)
		}
		if len(seq)%2 != 0 || len(seq) < 8 {
			t.Fatalf("callbacks %q: want elected/revoked pairs (4 terms)", seq)
		}
		for i := 0; i < len(seq); i += 2 {
			var a, b string
			var ta, tb uint64
			fmt.Sscanf(seq[i], "%s %d", &a, &ta)
			fmt.Sscanf(seq[i+1], "%s %d", &b, &tb)
			if a != "elected" || b != "revoked" || ta != tb {
				t.Fatalf("callbacks %q not paired at %d", seq, i)
			}
		}
	})
}

func TestRunWhileLeaderContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		causes := make(chan error, 4)
		s := open(t, b)
		e := start(t, s, "jobs", election.RunWhileLeader(func(ctx context.Context, tm *term.Term) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}))
		b.Expire(s.ID())
		advance(5*time.Second + time.Millisecond)
		if got := <-causes; got != term.SessionExpired {
			t.Fatalf("task ctx cause = %v, want SESSION_EXPIRED", got)
		}
		if err := e.StepDown(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		if got := <-causes; got != term.SteppedDown {
			t.Fatalf("task ctx cause = %v, want STEPPED_DOWN", got)
		}
	})
}

func TestEveryRunsOnlyWhileLeaderWithoutOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var mu sync.Mutex
		runs, running, overlaps := 0, 0, 0
		job := func(ctx context.Context, tm *term.Term) error {
			mu.Lock()
			runs++
			running++
			if running > 1 {
				overlaps++
			}
			mu.Unlock()
			select { // a run takes 3s, longer than... nothing: interval counts from its end
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
			}
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}
		s := open(t, b)
		e := start(t, s, "report", election.Every(10*time.Second, job, nil))
		advance(time.Minute) // runs at 0, 13, 26, 39, 52
		mu.Lock()
		if runs != 5 || overlaps != 0 {
			t.Fatalf("runs %d overlaps %d in a minute, want 5 and 0", runs, overlaps)
		}
		mu.Unlock()
		if err := e.StepDown(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		advance(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if runs != 5 {
			t.Fatalf("%d runs while not leader, want none", runs-5)
		}
	})
}

func TestInvalidName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, newBackend(t))
		if _, err := election.Start(s, "../etc", election.WithListener(election.Funcs{})); !errors.Is(err, deadline.ErrInvalidName) {
			t.Fatalf("Start(../etc) = %v, want ErrInvalidName", err)
		}
	})
}

// StepDown called while a Stop's handover is still waiting for the task
// completes with that handover: it does not return before the last
// OnRevoked, and it reports that the election is stopped (no cooldown).
func TestStepDownDuringStopWaitsForTheStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		stuck := make(chan struct{})
		a := start(t, open(t, b), "jobs", election.WithListener(listener(&l, "a")), election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stuck // ignores cancellation for a while
			return nil
		}))
		tm := a.Term()
		stopped := make(chan error, 1)
		go func() { stopped <- a.Stop(context.Background()) }()
		synctest.Wait()
		stepped := make(chan error, 1)
		go func() { stepped <- a.StepDown(context.Background(), time.Minute) }()
		synctest.Wait()
		select {
		case err := <-stepped:
			t.Fatalf("StepDown returned (%v) while Stop's handover still waits for the task; log %q", err, l.all())
		default:
		}
		close(stuck)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop = %v", err)
		}
		if err := <-stepped; !errors.Is(err, election.ErrStopped) {
			t.Fatalf("StepDown of a stopping election = %v, want ErrStopped", err)
		}
		if l.index(fmt.Sprintf("a revoked %d STOPPED", tm.Token())) < 0 || a.Status() != election.Stopped {
			t.Fatalf("after Stop and StepDown: status %v, log %q", a.Status(), l.all())
		}
		// And once stopped, StepDown returns at once with the same error.
		if err := a.StepDown(context.Background(), time.Minute); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("StepDown after Stop = %v, want ErrStopped", err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
	})
}

// Stop called during a StepDown's handover completes with it: one
// OnRevoked (STEPPED_DOWN), then STOPPED, and no new term afterwards.
func TestStopDuringStepDownHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		stuck := make(chan struct{})
		a := start(t, open(t, b), "jobs", election.WithListener(listener(&l, "a")), election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stuck
			return nil
		}))
		tm := a.Term()
		stepped := make(chan error, 1)
		go func() { stepped <- a.StepDown(context.Background(), time.Millisecond) }()
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- a.Stop(context.Background()) }()
		advance(time.Second) // the cooldown ends during the handover
		if _, _, ok := b.Owner("jobs"); !ok {
			t.Fatal("lease released before the task returned")
		}
		close(stuck)
		if err := <-stepped; err != nil {
			t.Fatalf("StepDown = %v", err)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("Stop = %v", err)
		}
		advance(time.Minute)
		want := []string{fmt.Sprintf("a elected %d", tm.Token()), fmt.Sprintf("a revoked %d STEPPED_DOWN", tm.Token())}
		if got := l.all(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("callbacks %q, want %q", got, want)
		}
		if a.Status() != election.Stopped {
			t.Fatalf("status %v, want STOPPED", a.Status())
		}
		if _, _, ok := b.Owner("jobs"); ok {
			t.Fatal("the stopped election holds the lease")
		}
	})
}

// StepDown while already in COOLDOWN restarts the cooldown from the new
// step-down; no callback, no attempt meanwhile.
func TestStepDownWhileInCooldown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		a := start(t, open(t, b), "jobs", election.WithListener(listener(&l, "a")))
		if err := a.StepDown(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		advance(10 * time.Second)
		if err := a.StepDown(context.Background(), 20*time.Second); err != nil {
			t.Fatalf("StepDown in COOLDOWN = %v", err)
		}
		attempts := b.Stats().Acquire
		advance(20*time.Second - time.Millisecond)
		if a.Status() != election.Cooldown || b.Stats().Acquire != attempts {
			t.Fatalf("status %v, %d attempts before the second cooldown ended", a.Status(), b.Stats().Acquire-attempts)
		}
		advance(2 * time.Millisecond)
		if a.Status() != election.Leader {
			t.Fatalf("after the second cooldown: %v, want LEADER", a.Status())
		}
		if n := len(l.all()); n != 3 { // elected, revoked STEPPED_DOWN, elected
			t.Fatalf("callbacks %q, want 3", l.all())
		}
	})
}

// The session expiring while a voluntary handover waits for its task ends
// the handover at once: the lease is gone, Stop completes, OnRevoked (with
// the voluntary reason the term already ended with) is delivered once.
func TestSessionExpiryDuringVoluntaryHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		var l log
		stuck := make(chan struct{})
		defer close(stuck)
		s := open(t, b)
		a := start(t, s, "jobs", election.WithListener(listener(&l, "a")), election.RunWhileLeader(func(ctx context.Context, _ *term.Term) error {
			<-stuck // ignores cancellation
			return nil
		}))
		tm := a.Term()
		stopped := make(chan error, 1)
		go func() { stopped <- a.Stop(context.Background()) }()
		synctest.Wait()
		b.Expire(s.ID())
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) before the handover ended", err)
		default:
		}
		advance(5*time.Second + time.Millisecond) // the renewal learns of the expiry
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatalf("Stop = %v", err)
			}
		default:
			t.Fatal("Stop still waits for the task although the session expired")
		}
		want := []string{fmt.Sprintf("a elected %d", tm.Token()), fmt.Sprintf("a revoked %d STOPPED", tm.Token())}
		if got := l.all(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("callbacks %q, want %q", got, want)
		}
		advance(time.Minute)
		if a.Status() != election.Stopped || len(l.all()) != 2 {
			t.Fatalf("status %v, callbacks %q: the stopped election competed again", a.Status(), l.all())
		}
	})
}

// An executor refusing OnElected while a Stop is under way: the term was
// never announced, so neither callback is delivered, the lease is given
// back and Stop completes.
func TestRefusedOnElectedWhileStopIsUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		s := open(t, b)
		deciding := make(chan struct{})
		decide := make(chan struct{})
		var once sync.Once
		refusing := election.ExecutorFunc(func(func()) error {
			once.Do(func() {
				close(deciding)
				<-decide // the executor takes its time to refuse OnElected
			})
			return errors.New("shutting down")
		})
		var calls sync.Map
		var refusals atomic.Int32
		e, err := election.Start(s, "jobs", election.WithExecutor(refusing),
			election.OnRefused(func(error) { refusals.Add(1) }),
			election.WithListener(election.Funcs{
				Elected: func(*term.Term) { calls.Store("elected", true) },
				Revoked: func(*term.Term, term.RevokeReason) { calls.Store("revoked", true) },
			}))
		if err != nil {
			t.Fatal(err)
		}
		<-deciding
		stopped := make(chan error, 1)
		go func() { stopped <- e.Stop(context.Background()) }()
		synctest.Wait()
		close(decide)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop = %v", err)
		}
		synctest.Wait()
		if _, ok := calls.Load("elected"); ok {
			t.Fatal("OnElected ran although refused")
		}
		if _, ok := calls.Load("revoked"); ok {
			t.Fatal("OnRevoked delivered for a term whose OnElected was refused")
		}
		if refusals.Load() != 1 || e.Status() != election.Stopped {
			t.Fatalf("refusals %d status %v, want 1 STOPPED", refusals.Load(), e.Status())
		}
		if _, _, ok := b.Owner("jobs"); ok {
			t.Fatal("lease still held after Stop")
		}
	})
}

// An election that is over without Stop (a single-term election whose
// term ended, an election whose session closed) stays STOPPED: StepDown
// cannot send it through COOLDOWN back to a CANDIDATE that never competes.
func TestStepDownOfAnElectionThatIsOverStaysStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		s := open(t, b)
		one := start(t, s, "once", election.SingleTerm("lock"))
		b.Expire(s.ID())
		advance(5*time.Second + time.Millisecond) // the renewal learns of the expiry
		if one.Status() != election.Stopped {
			t.Fatalf("single-term election after its term ended: %v, want STOPPED", one.Status())
		}
		if err := one.StepDown(context.Background(), time.Second); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("StepDown of an ended single-term election = %v, want ErrStopped", err)
		}
		advance(2 * time.Second)
		if one.Status() != election.Stopped {
			t.Fatalf("after StepDown and its cooldown: %v, want STOPPED", one.Status())
		}

		s2 := open(t, b.NewClient())
		e := start(t, s2, "jobs")
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.StepDown(context.Background(), time.Second); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("StepDown after the session closed = %v, want ErrStopped", err)
		}
		advance(2 * time.Second)
		if e.Status() != election.Stopped {
			t.Fatalf("after the session closed and StepDown: %v, want STOPPED", e.Status())
		}
	})
}
