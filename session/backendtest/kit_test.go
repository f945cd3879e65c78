package backendtest_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/backendtest"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

// kitMaxLease is the cap of the kit's memory stores, and kitMaxLockDelay
// their lock-delay cap: their quarantine is the sum.
const (
	kitMaxLease     = 2 * time.Second
	kitMaxLockDelay = 2 * time.Second
)

// memoryConfig runs the kit on the in-memory backend in virtual time, one
// store per namespace, capped at kitMaxLease. wrap, if not nil, turns each
// client into a broken variant.
func memoryConfig(wrap func(*memory.Backend) driver.Backend, opts ...memory.Option) backendtest.Config {
	clock := memory.NewManualClock(time.Unix(1_000_000, 0))
	opts = append([]memory.Option{memory.WithClock(clock), memory.WithMaxLease(kitMaxLease), memory.WithMaxLockDelay(kitMaxLockDelay)}, opts...)
	var mu sync.Mutex
	stores := map[string]*memory.Backend{}
	if wrap == nil {
		wrap = func(b *memory.Backend) driver.Backend { return b }
	}
	return backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			mu.Lock()
			defer mu.Unlock()
			if b, ok := stores[namespace]; ok {
				return wrap(b.NewClient())
			}
			b, err := memory.New(opts...)
			if err != nil {
				t.Fatalf("memory.New: %v", err)
			}
			stores[namespace] = b
			return wrap(b)
		},
		Lease:        2 * time.Second,
		MaxLease:     kitMaxLease,
		MaxLockDelay: kitMaxLockDelay,
		LoseData: func(*testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for _, b := range stores {
				b.LoseData(false)
			}
		},
		Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
	}
}

func TestRunOnMemory(t *testing.T) {
	backendtest.Run(t, memoryConfig(nil))
}

// uninitialisedConfig is memoryConfig on stores that start uninitialised,
// as Redis and ZooKeeper namespaces do, with Config.Init.
func uninitialisedConfig(opts ...memory.Option) backendtest.Config {
	cfg := memoryConfig(nil, append([]memory.Option{memory.WithUninitialisedNamespace()}, opts...)...)
	cfg.Init = func(t *testing.T, namespace string) {
		if err := cfg.NewBackend(t, namespace).(*memory.Backend).Init(t.Context()); err != nil {
			t.Fatalf("Init: %v", err)
		}
	}
	return cfg
}

func TestRunOnUninitialisedMemory(t *testing.T) {
	backendtest.Run(t, uninitialisedConfig())
}

// Broken variants of the memory backend, each breaking one promise, and the
// subtests that must catch it: proof that the kit's checks can fail.
var brokenBackends = []struct {
	name string
	cfg  func() backendtest.Config
	want []string // the failing subtests, exactly
	run  string   // the kit's subtests to run, as the -test.run pattern's tail; empty: all
}{
	{
		name: "TokensGoBackAfterDataLoss",
		cfg:  func() backendtest.Config { return memoryConfig(nil, memory.WithoutTokenEpochs()) },
		want: []string{"TokensSurviveDataLoss"},
	},
	{
		name: "QuarantineSkipped",
		cfg:  func() backendtest.Config { return memoryConfig(nil, memory.WithoutQuarantine()) },
		want: []string{"TokensSurviveDataLoss"},
	},
	{
		name: "QuarantineSkippedOnNewNamespace",
		cfg:  func() backendtest.Config { return uninitialisedConfig(memory.WithoutQuarantine()) },
		want: []string{"TokensSurviveDataLoss", "UninitialisedNamespaceQuarantined"},
	},
	{
		// The backend's quarantine (its cap, 1s) is shorter than the
		// maximum lease the Config declares.
		name: "QuarantineShorterThanMaxLease",
		cfg:  func() backendtest.Config { return memoryConfig(nil, memory.WithMaxLease(time.Second)) },
		want: []string{"TokensSurviveDataLoss"},
	},
	{
		// Config.Init declares new namespaces quarantined; these are not.
		name: "NewNamespaceNotQuarantined",
		cfg: func() backendtest.Config {
			cfg := memoryConfig(nil)
			cfg.Init = func(*testing.T, string) {}
			return cfg
		},
		want: []string{"UninitialisedNamespaceQuarantined"},
	},
	{
		// The quarantine lives in the memory of the client that found the
		// loss: another process grants at once.
		name: "QuarantineOnlyInTheFinder",
		cfg:  finderOnlyConfig,
		want: []string{"TokensSurviveDataLoss"},
	},
	{
		name: "ExpiresLate", // the backend's clock runs at half speed
		cfg:  func() backendtest.Config { return memoryConfig(nil, memory.WithClock(halfSpeed{start: time.Now()})) },
		want: []string{"ExpiredSessionStaysExpired", "InspectSkipsExpiredHolders", "LockDelayAfterExpiry", "TakeoverAfterExpiry", "TokensSurviveDataLoss"},
	},
	{
		name: "ReleaseIgnoresToken",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return releaseAny{b} })
		},
		want: []string{"StaleReleaseIsNoop", "TakeoverAfterExpiry"},
	},
	{
		name: "VersionNeverChanges",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return fixedVersion{b} })
		},
		want: []string{"RenewReportsOwnedLeases"},
	},
	{
		name: "NamesNotValidated",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return noValidation{b} })
		},
		want: []string{"BatchAcquire", "InvalidNamesRejected"},
	},
	{
		name: "ContextIgnored",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return ignoreCtx{b} })
		},
		want: []string{"ContextHonoured"},
	},
	{
		name: "CloseKeepsLeases",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return closeNoop{b} })
		},
		want: []string{"BroadcastOnRelease", "CloseReleasesEverything", "ContextHonoured", "InspectListsHolders", "LockDelaySkippedOnClose", "TokensStrictlyIncrease"},
	},
	{
		name: "RevivesExpiredSessions",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return revive{b} })
		},
		want: []string{"CloseReleasesEverything", "ExpiredSessionStaysExpired", "TokensSurviveDataLoss"},
	},
	{
		name: "AcquireIgnoresHolder",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return grabAll{b} })
		},
		want: []string{"AcquireRefusedWhileOwned", "BatchAcquire", "BroadcastOnRelease", "LockDelayAfterExpiry", "RacingAcquireOneWinner", "StaleReleaseIsNoop", "TokensSurviveDataLoss"},
	},
	{
		name: "LockDelayIgnored",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return delayIgnored{b} })
		},
		want: []string{"LockDelayAfterExpiry"},
	},
	{
		name: "LockDelayOnTheFirstNameOnly",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return delayFirstOnly{b} })
		},
		want: []string{"LockDelayAfterExpiry"},
	},
	{
		// In real time: a machine that stalls across the end of the delay
		// lets no refusal be seen inside it, so a backend that ignores
		// the delay cannot be told from one that honours it; the kit must
		// say so instead of passing.
		name: "LockDelayIgnoredOnAStalledMachine",
		cfg:  stalledConfig,
		want: []string{"LockDelayAfterExpiry"},
		run:  "/^Promises$/^LockDelayAfterExpiry$",
	},
	{
		name: "LockDelayUnchecked",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return delayClamped{b} })
		},
		want: []string{"LockDelayOutOfRangeRefused"},
	},
	{
		name: "SilentBroadcaster",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return silent{b} })
		},
		want: []string{"BroadcastOnRelease"},
	},
	{
		name: "InspectPrefixAsPattern",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return likePrefix{b} })
		},
		want: []string{"InspectListsHolders"},
	},
	{
		name: "OwnerNotValidated",
		cfg: func() backendtest.Config {
			return memoryConfig(func(b *memory.Backend) driver.Backend { return noOwnerCheck{b} })
		},
		want: []string{"InspectRejectsInvalidInput"},
	},
}

// childEnv names the broken backend a re-executed test binary runs the kit
// on; the parent checks which subtests failed.
const childEnv = "BACKENDTEST_BROKEN_CHILD"

var failLine = regexp.MustCompile(`--- FAIL: TestKitCatchesBrokenBackends/(\w+)/(?:Promises/)?(\w+)`)

func TestKitCatchesBrokenBackends(t *testing.T) {
	child := os.Getenv(childEnv)
	for _, bb := range brokenBackends {
		t.Run(bb.name, func(t *testing.T) {
			if child == bb.name {
				cfg := bb.cfg()
				cfg.NoticeTimeout = 200 * time.Millisecond // the silent broadcaster's wait
				backendtest.Run(t, cfg)
				return
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestKitCatchesBrokenBackends$/^"+bb.name+"$"+bb.run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+bb.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("running the kit on %s: err = %v, want a failing test binary; output:\n%s", bb.name, err, out)
			}
			failed := map[string]bool{}
			for _, m := range failLine.FindAllStringSubmatch(string(out), -1) {
				if m[1] == bb.name && m[2] != "Promises" {
					failed[m[2]] = true
				}
			}
			if got := slices.Sorted(maps.Keys(failed)); !slices.Equal(got, bb.want) {
				t.Errorf("kit on %s: failed subtests %q, want %q; output:\n%s", bb.name, got, bb.want, out)
			}
		})
	}
}

// likePrefix matches an inspection prefix as SQL LIKE would without
// escaping: "_" stands for any one character.
type likePrefix struct{ *memory.Backend }

func (b likePrefix) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	if len(req.Names) > 0 || req.Prefix == "" {
		return b.Backend.Inspect(ctx, req)
	}
	if _, err := b.Backend.Inspect(ctx, req); err != nil {
		return nil, err
	}
	all, err := b.Backend.Inspect(ctx, driver.InspectRequest{})
	var out []driver.Holder
	for _, h := range all {
		if len(h.Name) >= len(req.Prefix) && likeMatch(h.Name[:len(req.Prefix)], req.Prefix) {
			out = append(out, h)
		}
	}
	return out, err
}

func likeMatch(s, pattern string) bool {
	for i := range pattern {
		if pattern[i] != '_' && pattern[i] != s[i] {
			return false
		}
	}
	return true
}

// noOwnerCheck opens sessions for invalid owners (storing none).
type noOwnerCheck struct{ *memory.Backend }

func (b noOwnerCheck) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if deadline.ValidateOwner(req.Owner.Identity, req.Owner.Metadata) != nil {
		req.Owner = driver.Owner{}
	}
	return b.Backend.Open(ctx, req)
}

// halfSpeed is a clock running at half the real rate.
type halfSpeed struct{ start time.Time }

func (c halfSpeed) Now() time.Time { return c.start.Add(time.Since(c.start) / 2) }

// finderOnlyConfig is memoryConfig on stores without their own
// quarantine, whose clients keep one each, in their own memory: the first
// client to Acquire after a loss is quarantined for kitMaxLease, the others
// are not.
func finderOnlyConfig() backendtest.Config {
	clock := memory.NewManualClock(time.Unix(1_000_000, 0))
	var lost atomic.Bool
	cfg := memoryConfig(func(b *memory.Backend) driver.Backend {
		return &finderOnly{Backend: b, clock: clock, lost: &lost}
	}, memory.WithoutQuarantine(), memory.WithClock(clock))
	loseData := cfg.LoseData
	cfg.LoseData = func(t *testing.T) { loseData(t); lost.Store(true) }
	cfg.Advance = func(_ *testing.T, d time.Duration) { clock.Advance(d) }
	return cfg
}

type finderOnly struct {
	*memory.Backend
	clock *memory.ManualClock
	lost  *atomic.Bool // a loss nobody found yet
	until time.Time    // this client's quarantine
}

func (b *finderOnly) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	now := b.clock.Now()
	if b.lost.CompareAndSwap(true, false) {
		b.until = now.Add(kitMaxLease + kitMaxLockDelay)
	}
	if q := b.until.Sub(now); q > 0 {
		r := driver.AcquireReply{Quarantine: q}
		for _, n := range req.Names {
			r.Results = append(r.Results, driver.AcquireResult{Name: n})
		}
		return r, nil
	}
	return b.Backend.Acquire(ctx, req)
}

// releaseAny releases a name from whoever holds it, ignoring token and
// session.
type releaseAny struct{ *memory.Backend }

func (b releaseAny) Release(ctx context.Context, req driver.ReleaseRequest) error {
	for _, l := range req.Leases {
		if id, tok, ok := b.Owner(l.Name); ok {
			if err := b.Backend.Release(ctx, driver.ReleaseRequest{ID: id, Leases: []driver.Lease{{Name: l.Name, Token: tok}}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// fixedVersion answers Version 1 whatever the owned set.
type fixedVersion struct{ *memory.Backend }

func (b fixedVersion) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := b.Backend.Renew(ctx, driver.RenewRequest{ID: req.ID})
	r.Version = 1
	if req.KnownVersion == 1 {
		r.Full, r.Leases = false, nil
	}
	return r, err
}

// noValidation answers token 0 and no error for an invalid name.
type noValidation struct{ *memory.Backend }

func (b noValidation) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := b.Backend.Acquire(ctx, req)
	for i := range r.Results {
		if errors.Is(r.Results[i].Err, deadline.ErrInvalidName) {
			r.Results[i].Err = nil
		}
	}
	return r, err
}

// ignoreCtx drops the caller's context.
type ignoreCtx struct{ *memory.Backend }

func (b ignoreCtx) Open(_ context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	return b.Backend.Open(context.Background(), req)
}

// closeNoop does not close anything.
type closeNoop struct{ *memory.Backend }

func (closeNoop) Close(context.Context, driver.ID) error { return nil }

// silent subscribes nobody.
type silent struct{ *memory.Backend }

func (silent) Subscribe(func(driver.Notice)) (func(), error) { return func() {}, nil }

// revive answers a renewal of an ended session as if it were alive.
type revive struct{ *memory.Backend }

func (b revive) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	r, err := b.Backend.Renew(ctx, req)
	if errors.Is(err, driver.ErrExpired) {
		return driver.RenewReply{Remaining: time.Second, Version: 1, Full: true}, nil
	}
	return r, err
}

// grabAll answers a token for a name another live session holds.
type grabAll struct{ *memory.Backend }

func (b grabAll) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	r, err := b.Backend.Acquire(ctx, req)
	for i := range r.Results {
		if r.Results[i].Err == nil && r.Results[i].Token == 0 {
			_, tok, _ := b.Owner(r.Results[i].Name)
			r.Results[i].Token = tok + 1
		}
	}
	return r, err
}

// delayIgnored grants every term without its lock-delay (a valid one: an
// invalid one is still refused).
type delayIgnored struct{ *memory.Backend }

func (b delayIgnored) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if req.LockDelay > 0 && req.LockDelay <= kitMaxLockDelay {
		req.LockDelay = 0
	}
	return b.Backend.Acquire(ctx, req)
}

// stalledConfig runs the kit in real time on memory stores that ignore the
// lock-delay and make the first candidate's Acquire of a delayed name, in
// the last 150ms of its holder's session, answer 1.3s late: the kit's
// next look comes after the delay would have ended.
func stalledConfig() backendtest.Config {
	const lease, delay = 2 * time.Second, time.Second
	var mu sync.Mutex
	stores := map[string]*memory.Backend{}
	stalled := map[string]bool{}
	return backendtest.Config{
		NewBackend: func(t *testing.T, namespace string) driver.Backend {
			mu.Lock()
			defer mu.Unlock()
			b, ok := stores[namespace]
			if ok {
				b = b.NewClient()
			} else {
				var err error
				if b, err = memory.New(memory.WithMaxLease(lease), memory.WithMaxLockDelay(delay)); err != nil {
					t.Fatalf("memory.New: %v", err)
				}
				stores[namespace] = b
			}
			return stallAtEnd{Backend: b, mu: &mu, stalled: stalled}
		},
		Lease:        lease,
		MaxLease:     lease,
		MaxLockDelay: delay,
	}
}

type stallAtEnd struct {
	*memory.Backend
	mu      *sync.Mutex
	stalled map[string]bool
}

func (s stallAtEnd) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	asked := req.LockDelay
	if asked > 0 && asked <= time.Second {
		req.LockDelay = 0 // ignored
	}
	stall := false
	if asked == 0 && len(req.Names) > 0 {
		if owner, _, held := s.Owner(req.Names[0]); held && owner != req.ID {
			if left, live := s.Remaining(owner); live && left <= 150*time.Millisecond {
				s.mu.Lock()
				stall = !s.stalled[req.Names[0]]
				s.stalled[req.Names[0]] = true
				s.mu.Unlock()
			}
		}
	}
	reply, err := s.Backend.Acquire(ctx, req)
	if stall {
		time.Sleep(1300 * time.Millisecond) // the machine stalls: the reply is late
	}
	return reply, err
}

// delayFirstOnly records a request's lock-delay for its first name only,
// as a backend that writes the delay record once per request rather than
// once per name would.
type delayFirstOnly struct{ *memory.Backend }

func (b delayFirstOnly) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if req.LockDelay <= 0 || req.LockDelay > kitMaxLockDelay || len(req.Names) < 2 {
		return b.Backend.Acquire(ctx, req)
	}
	first, err := b.Backend.Acquire(ctx, driver.AcquireRequest{ID: req.ID, Names: req.Names[:1], LockDelay: req.LockDelay})
	if err != nil {
		return first, err
	}
	rest, err := b.Backend.Acquire(ctx, driver.AcquireRequest{ID: req.ID, Names: req.Names[1:]})
	if err != nil {
		return rest, err
	}
	first.Results = append(first.Results, rest.Results...)
	first.Quarantine = max(first.Quarantine, rest.Quarantine)
	return first, nil
}

// delayClamped honours an invalid lock-delay as the nearest valid one
// instead of refusing it.
type delayClamped struct{ *memory.Backend }

func (b delayClamped) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	req.LockDelay = min(max(req.LockDelay, 0), kitMaxLockDelay)
	return b.Backend.Acquire(ctx, req)
}
