package etcdsimba_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRevokeGuardHoldsANameRevokedEarly: the holder renews, and its etcd
// lease is revoked at once, as a deposed leader's forwarded revocation
// does on every etcd but 3.4.31-3.4.33 / 3.5.13-3.5.15 (etcd-io/etcd#15247, ADR 0290, 0320;
// TestLeaderStalledTimeline shows it on a real stall). Under the revoke
// guard the candidate is refused until the belief that renewal gave the
// holder (its send time + the remaining it reported) has run out, then
// granted with a higher token. Without the guard it was granted at once:
// two holders for a lease. The guard is WithRevokeGuard's, and the
// default's on an affected server (ADR 0305): on before any check, and
// still on once the check has found the member's version.
func TestRevokeGuardHoldsANameRevokedEarly(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []etcdsimba.Option
	}{
		{"WithRevokeGuard", []etcdsimba.Option{etcdsimba.WithRevokeGuard()}},
		{"default", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { revokedEarly(t, tc.opts) })
	}
}

func revokedEarly(t *testing.T, guard []etcdsimba.Option) {
	const lease = 2 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	opts := append([]etcdsimba.Option{etcdsimba.WithMaxLease(lease)}, guard...)
	hb := newBackend(t, cli, ns, opts...)
	if !etcdsimba.GuardOn(hb) {
		t.Fatal("the revoke guard is off before any version check")
	}
	cb := newBackendNoInit(t, newClient(t, single(t)), ns, opts...)
	holder, cand := openOn(t, hb, lease), openOn(t, cb, lease)
	if len(guard) == 0 {
		st, err := cli.Status(ctxT(t, 5*time.Second), single(t)[0])
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if !etcdsimba.RevokesEarly(st.Version) {
			t.Skipf("etcd %s does not revoke early: the default turns the guard off (TestRevokeGuardTurnsOffAndBackOn)", st.Version)
		}
		for end := time.Now().Add(10 * time.Second); !etcdsimba.VersionsChecked(hb); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the version check did not finish within 10 s of the first Open")
			}
		}
		if !etcdsimba.GuardOn(hb) {
			t.Fatalf("the revoke guard is off after the version check found etcd %s", st.Version)
		}
	}
	tok := holder.mustAcquire("x")
	// The marker is put by the granting transaction itself: a revocation
	// has no moment between the two to fall into.
	r2, err := cli.Txn(ctxT(t, 5*time.Second)).Then(clientv3.OpGet(ns+"/@simba/l/x"), clientv3.OpGet(ns+"/@simba/d/x")).Commit()
	if err != nil {
		t.Fatalf("read x's keys: %v", err)
	}
	kv, mkv := r2.Responses[0].GetResponseRange().Kvs, r2.Responses[1].GetResponseRange().Kvs
	if len(kv) != 1 || len(mkv) != 1 || kv[0].CreateRevision != mkv[0].ModRevision {
		t.Fatalf("x's lease key %v and marker %v: want both, written in one transaction", kv, mkv)
	}
	sent := time.Now()
	r, err := holder.renew(5 * time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	belief := sent.Add(r.Remaining)
	l, _ := parseLease(string(holder.id))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), l); err != nil {
		t.Fatalf("revoke the holder's etcd lease: %v", err)
	}
	holdsUntil(t, cand, "x", tok, belief, lease)
	if _, err := holder.renew(5 * time.Second); !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("the holder's Renew after its etcd lease was revoked: %v, want ErrExpired", err)
	}
}

// TestWithoutRevokeGuardFreesARevokedNameAtOnce: the opt-out's cost,
// shown: the same early revocation leaves no marker, and the candidate
// is granted the name while the holder's belief still runs.
func TestWithoutRevokeGuardFreesARevokedNameAtOnce(t *testing.T) {
	const lease = 2 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	opts := []etcdsimba.Option{etcdsimba.WithMaxLease(lease), etcdsimba.WithoutRevokeGuard()}
	b := newBackend(t, cli, ns, opts...)
	if etcdsimba.GuardOn(b) {
		t.Fatal("WithoutRevokeGuard: the guard is on")
	}
	holder, cand := openOn(t, b, lease), openOn(t, b, lease)
	tok := holder.mustAcquire("x")
	l, _ := parseLease(string(holder.id))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), l); err != nil {
		t.Fatalf("revoke the holder's etcd lease: %v", err)
	}
	if got := cand.mustAcquire("x"); got <= tok {
		t.Fatalf("token %d after the revocation, want > %d", got, tok)
	}
}

// TestRevokeGuardOptionsConflict: forcing the guard on and turning it off
// together is refused by New, naming both options.
func TestRevokeGuardOptionsConflict(t *testing.T) {
	cli := newClient(t, single(t))
	for _, opts := range [][]etcdsimba.Option{
		{etcdsimba.WithRevokeGuard(), etcdsimba.WithoutRevokeGuard()},
		{etcdsimba.WithoutRevokeGuard(), etcdsimba.WithRevokeGuard()},
	} {
		_, err := etcdsimba.New(cli, newNamespace(t), opts...)
		if !errors.Is(err, etcdsimba.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRevokeGuard and WithoutRevokeGuard") {
			t.Errorf("New with both guard options: %v, want ErrInvalidOption naming both", err)
		}
	}
}

// TestRevokeGuardReleaseIsImmediate: the guard's delay is only for a term
// that ends without a release: a release or Close hands the name over at
// once.
func TestRevokeGuardReleaseIsImmediate(t *testing.T) {
	const lease = 2 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLease(lease), etcdsimba.WithRevokeGuard())
	a, c := openOn(t, b, lease), openOn(t, b, lease)
	tok := a.mustAcquire("x")
	a.release("x", tok)
	t2 := c.mustAcquire("x")
	if err := b.Close(ctxT(t, 5*time.Second), c.id); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if t3 := openOn(t, b, lease).mustAcquire("x"); t3 <= t2 {
		t.Fatalf("token after Close %d, want > %d", t3, t2)
	}
}

// TestVersionCheckLogsAnAffectedServer: the first Open asks every
// member's version and says what it means for the guard: by default a
// warning naming etcd-io/etcd#15247 that the guard is on because of the
// version; with WithoutRevokeGuard an error (two holders are possible);
// with WithRevokeGuard neither.
func TestVersionCheckLogsAnAffectedServer(t *testing.T) {
	eps := single(t)
	cli := newClient(t, eps)
	st, err := cli.Status(ctxT(t, 5*time.Second), eps[0])
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	affected := etcdsimba.RevokesEarly(st.Version)
	for _, tc := range []struct {
		name        string
		opt         etcdsimba.Option
		warn, error bool // on an affected version
	}{
		{"default", nil, true, false},
		{"WithRevokeGuard", etcdsimba.WithRevokeGuard(), false, false},
		{"WithoutRevokeGuard", etcdsimba.WithoutRevokeGuard(), false, true},
	} {
		var buf syncBuffer
		opts := []etcdsimba.Option{etcdsimba.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))}
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		b := newBackend(t, cli, newNamespace(t), opts...)
		openOn(t, b, 2*time.Second)
		if err := b.Shutdown(ctxT(t, 10*time.Second)); err != nil { // waits for the check
			t.Fatalf("Shutdown: %v", err)
		}
		log := buf.String()
		warned := strings.Contains(log, "level=WARN") && strings.Contains(log, "15247") && strings.Contains(log, "the revoke guard is on because of")
		errored := strings.Contains(log, "level=ERROR") && strings.Contains(log, "15247") && strings.Contains(log, "WithoutRevokeGuard")
		if warned != (affected && tc.warn) || errored != (affected && tc.error) {
			t.Errorf("etcd %s, %s: warned %v, errored %v; want %v, %v (log %q)", st.Version, tc.name, warned, errored, affected && tc.warn, affected && tc.error, log)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRevokeGuardTurnsOffAndBackOn: by default the guard follows the
// members' versions (ADR 0305), with no hole at either turn. The server is
// affected, so the test judges versions itself: fixed until it
// "downgrades" the member.
//   - Proven fixed, the guard turns off: x is granted without a marker.
//   - Downgraded, the next renewal's Status shows it: the guard is back
//     on, x (a live term granted without it) gets its marker, and a new
//     grant y carries one.
//   - Upgraded and checked again, the guard turns off: z has no marker,
//     and y's release (a term granted under the guard) deletes its
//     marker: the name is free at once.
//   - x's holder's etcd lease revoked early: z is free at once, x stays
//     refused until the holder's belief has run out.
func TestRevokeGuardTurnsOffAndBackOn(t *testing.T) {
	const lease = 2 * time.Second
	cli := newClient(t, single(t))
	ns := newNamespace(t)
	var downgraded atomic.Bool
	hb := newBackend(t, cli, ns, etcdsimba.WithMaxLease(lease))
	etcdsimba.JudgeVersionsForTest(hb, func(string) bool { return downgraded.Load() })
	cb := newBackendNoInit(t, newClient(t, single(t)), ns, etcdsimba.WithMaxLease(lease))
	marked := func(name string) bool {
		t.Helper()
		r, err := cli.Get(ctxT(t, 5*time.Second), ns+"/@simba/d/"+name)
		if err != nil {
			t.Fatalf("read %s's marker: %v", name, err)
		}
		return len(r.Kvs) > 0
	}
	within := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not within 10 s: %s", what)
			}
		}
	}
	holder := openOn(t, hb, lease)
	within("the guard off once every member is proven fixed", func() bool { return etcdsimba.VersionsChecked(hb) && !etcdsimba.GuardOn(hb) })
	x := holder.mustAcquire("x")
	if marked("x") {
		t.Fatal("x, granted with the guard off, has a marker")
	}

	downgraded.Store(true)
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if !etcdsimba.GuardOn(hb) {
		t.Fatal("the guard is still off after a renewal's Status showed an affected version")
	}
	within("x's marker, put on the live term when the guard came back on", func() bool { return marked("x") })
	y := holder.mustAcquire("y")
	if !marked("y") {
		t.Fatal("y, granted with the guard back on, has no marker")
	}

	downgraded.Store(false)
	etcdsimba.RecheckVersionsForTest(hb)
	if _, err := holder.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	within("the guard off again once the member is proven fixed", func() bool { return !etcdsimba.GuardOn(hb) })
	z := holder.mustAcquire("z")
	if marked("z") {
		t.Fatal("z, granted with the guard off again, has a marker")
	}
	holder.release("y", y)
	if marked("y") {
		t.Fatal("y's release left its marker")
	}
	cand := openOn(t, cb, lease)
	if got := cand.mustAcquire("y"); got <= y {
		t.Fatalf("y after its release: token %d, want > %d", got, y)
	}

	sent := time.Now()
	r, err := holder.renew(5 * time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	belief := sent.Add(r.Remaining)
	l, _ := parseLease(string(holder.id))
	if _, err := cli.Revoke(ctxT(t, 5*time.Second), l); err != nil {
		t.Fatalf("revoke the holder's etcd lease: %v", err)
	}
	if got := cand.mustAcquire("z"); got <= z {
		t.Fatalf("z after the revocation: token %d, want > %d", got, z)
	}
	holdsUntil(t, cand, "x", x, belief, lease)
}

// holdsUntil asks name for cand until it is granted: never before belief
// (the holder's), within the guard's delay after it, with a token above
// tok.
func holdsUntil(t *testing.T, cand *sessionOn, name string, tok uint64, belief time.Time, lease time.Duration) {
	t.Helper()
	var got uint64
	var err error
	for end := time.Now().Add(lease + 4*time.Second); got == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := cand.renew(time.Second); err != nil {
			t.Fatalf("the candidate's Renew: %v", err)
		}
		at := time.Now()
		got, _, err = cand.acquire(name)
		if got != 0 && at.Before(belief) {
			t.Fatalf("candidate granted %s (token %d) %v before the holder's belief ran out: two holders", name, got, belief.Sub(at))
		}
	}
	if got <= tok {
		t.Fatalf("candidate's token for %s %d after the guard's delay (err %v), want > %d", name, got, err, tok)
	}
}
