package redissimba

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

// ErrClientConfig is wrapped by the error [New] returns for a client whose
// options would break the engine's timing.
var ErrClientConfig = errors.New("redissimba: unsuitable redis client")

// client is the part of redis.UniversalClient the backend uses: scripts,
// pub/sub and the read of the name index.
type client interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	ZRangeByLex(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.StringSliceCmd
	Info(ctx context.Context, sections ...string) *redis.StringCmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
}

// Backend runs Simba sessions on Redis. It implements [driver.Backend]
// and [driver.Broadcaster]. One Backend serves any number of sessions of
// one namespace and is safe for concurrent use.
type Backend struct {
	rdb  client
	uc   redis.UniversalClient // rdb, for pipelines (WithWaitReplicas)
	ns   string
	keys keys
	opts options

	mu   sync.Mutex // guards sub
	sub  *subscription
	next uint64 // id of the last subscriber
	shut bool   // Shutdown was called: Subscribe refuses

	checkMu sync.Mutex
	checked bool // CheckServer passed (checkOnce)

	hintMu sync.Mutex
	hints  map[string]driver.ID // name → its owner when last seen, see Acquire

	noFunctions atomic.Bool // the server refused the acquire function: use the script (functions.go)

	// Script arguments that never change, boxed once: an any made from a
	// string or an int64 on every call is an allocation each.
	argSession, argChannel, argMaxLease, argRestart any
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Broadcaster = (*Backend)(nil)
)

// Option configures [New].
type Option func(*options)

type options struct {
	subscribeTimeout time.Duration
	log              *slog.Logger
	maxLease         time.Duration
	waitReplicas     int
	waitTimeout      time.Duration
	noRestartCheck   bool // WithoutRestartQuarantine
}

// DefaultMaxLease is the longest lease a [Backend] grants unless
// [WithMaxLease] says otherwise: twice the engine's default lease
// (deadline.DefaultLeaseDuration, 15 s), and the length of the quarantine
// after a data loss.
const DefaultMaxLease = 30 * time.Second

// WithMaxLease caps the lease of every session the backend opens and
// renews at d, rounded up to whole milliseconds. It is also the length of
// the quarantine after the namespace loses its records (ADR 0130): one
// maximum lease, on the Redis clock, in which no lease is granted, so that
// every term granted before the loss has ended on its holder's clock. Every
// process of a namespace must use the same value: the quarantine the process
// that notices the loss starts, from its own cap, must outlast the leases
// all of them grant, so one with a smaller cap than the others would end it
// before their terms (a holder cut off from Redis believes until its
// deadline). Zero means [DefaultMaxLease]; a shorter cap makes a data
// loss cheaper, a longer one allows longer session leases.
func WithMaxLease(d time.Duration) Option {
	return func(o *options) { o.maxLease = d }
}

// WithoutRestartQuarantine turns off the quarantine after a change of
// server incarnation (ADR 0131). By default the namespace's epoch records
// the run_id of the Redis process that wrote it, and an Acquire served by
// another process (a restart, a failover to a replica, a Cluster slot
// moved to another node) starts a quarantine of one maximum lease
// ([WithMaxLease]), because the data it serves may be an older state that
// lacks leases granted since, while their holders still believe in them.
//
// It is safe only when no such change can bring back an older state than
// the one the sessions acted on: every node that can serve the namespace
// persists with appendonly yes and appendfsync always (a restart then
// loses no acknowledged write), and either it has no replicas or every
// process of the namespace uses [WithWaitReplicas] with n equal to the
// number of replicas, with a failover that promotes only a replica that
// acknowledged; and no Cluster reshard moves the namespace's slot while
// sessions hold leases (MIGRATE carries the keys whole, but a move is a
// change of incarnation this option stops noticing). A restart without
// persistence, or a FLUSHALL, is still quarantined: the epoch is gone.
// With RDB snapshots alone, or appendfsync everysec or no, this option
// lets a new session take a lease at once after a crash while its holder
// still believes in it. Every process of a namespace should use the same
// setting: one that checks still quarantines for all of them.
func WithoutRestartQuarantine() Option {
	return func(o *options) { o.noRestartCheck = true }
}

// WithLogger sets the logger of the server check the first Open runs
// ([Backend.CheckServer]). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithSubscribeTimeout bounds how long [Backend.Subscribe] waits for Redis
// to confirm the subscription. The default is 5 seconds.
func WithSubscribeTimeout(d time.Duration) Option {
	return func(o *options) { o.subscribeTimeout = d }
}

// New returns a backend for namespace ns on rdb, which may be a
// *redis.Client (standalone or Sentinel failover) or a *redis.ClusterClient.
// Applications using different namespaces on one Redis never see each
// other's leases.
//
// rdb must have ContextTimeoutEnabled set (see the package documentation);
// New returns an error wrapping [ErrClientConfig] otherwise, and one
// wrapping [ErrInvalidNamespace] for a bad namespace.
func New(rdb redis.UniversalClient, ns string, opts ...Option) (*Backend, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil client", ErrClientConfig)
	}
	if err := ValidateNamespace(ns); err != nil {
		return nil, err
	}
	if err := checkClient(rdb); err != nil {
		return nil, err
	}
	o := options{subscribeTimeout: 5 * time.Second, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		return nil, errors.New("redissimba: WithLogger(nil)")
	}
	if o.subscribeTimeout <= 0 {
		return nil, fmt.Errorf("redissimba: subscribe timeout %v, want > 0", o.subscribeTimeout)
	}
	switch {
	case o.maxLease == 0:
		o.maxLease = DefaultMaxLease
	case o.maxLease < 0:
		return nil, fmt.Errorf("redissimba: WithMaxLease(%v): want ≥ 0 (0 means %v)", o.maxLease, DefaultMaxLease)
	}
	if o.waitReplicas < 0 || o.waitReplicas > 0 && o.waitTimeout <= 0 {
		return nil, fmt.Errorf("redissimba: WithWaitReplicas(%d, %v): want n ≥ 0 and, with n > 0, a timeout > 0 (WAIT 0 would block forever)", o.waitReplicas, o.waitTimeout)
	}
	b := &Backend{rdb: rdb, uc: rdb, ns: ns, keys: newKeys(ns), opts: o, hints: map[string]driver.ID{}}
	b.argSession, b.argChannel, b.argMaxLease, b.argRestart = b.keys.session, b.keys.channel, b.maxLeaseMS(), b.restartCheck()
	return b, nil
}

// checkClient refuses clients that ignore context deadlines: the engine
// bounds each call by the renewal period, and a call that outlives it
// holds the only renewal slot.
func checkClient(rdb redis.UniversalClient) error {
	var enabled bool
	switch c := rdb.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return fmt.Errorf("%w: a Ring spreads keys over shards without a common store, which cannot keep a lease exclusive", ErrClientConfig)
	default:
		// A wrapper we cannot inspect: trust it.
		return nil
	}
	if !enabled {
		return fmt.Errorf("%w: ContextTimeoutEnabled is false, so calls would not stop at the engine's deadline; set it in the client's options", ErrClientConfig)
	}
	return nil
}

// Namespace returns the backend's namespace.
func (b *Backend) Namespace() string {
	return b.ns
}

// Open opens a session with a random 128-bit id from crypto/rand. The
// lease is rounded up to whole milliseconds, the unit of PEXPIRE, and
// capped at the maximum lease ([WithMaxLease]). Open works during a
// quarantine: the session waits like any candidate.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if req.LeaseDuration <= 0 {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: lease duration %v, want > 0", req.LeaseDuration)
	}
	if err := b.checkOnce(ctx); err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	ms := min(millis(req.LeaseDuration), b.maxLeaseMS())
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: session id: %w", err)
	}
	id := driver.ID(hex.EncodeToString(raw[:]))
	owner, err := encodeOwner(req.Owner)
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	ttl, err := b.run(ctx, openScript, []string{b.keys.session + string(id)}, int64(ms), owner).Int64()
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	return driver.OpenReply{ID: id, Remaining: pttl(ttl)}, nil
}

// millis rounds d up to whole milliseconds.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (b *Backend) maxLeaseMS() int64 { return millis(b.opts.maxLease) }

// pttl turns a PTTL reply into a duration; a negative reply (no key, no
// expiry) means nothing is left.
func pttl(ms int64) time.Duration {
	if ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

func expired(op string, id driver.ID) error {
	return fmt.Errorf("redissimba: %s: session %s: %w", op, id, driver.ErrExpired)
}

// Renew extends the session by its lease (capped at the maximum lease) with
// one script call, whatever the number of leases it owns. The reply lists
// the owned leases only when their version differs from req.KnownVersion.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if !validID(req.ID) {
		return driver.RenewReply{}, expired("renew", req.ID)
	}
	res, err := b.run(ctx, renewScript, []string{b.keys.session + string(req.ID)},
		strconv.FormatUint(req.KnownVersion, 10), b.maxLeaseMS()).Result()
	if err != nil {
		return driver.RenewReply{}, fmt.Errorf("redissimba: renew: %w", err)
	}
	if n, ok := res.(int64); ok && n < 0 {
		return driver.RenewReply{}, expired("renew", req.ID)
	}
	rep, err := parseRenew(res)
	if err != nil {
		return driver.RenewReply{}, fmt.Errorf("redissimba: renew: %w", err)
	}
	return rep, nil
}

// parseRenew decodes {pttl, version[, hgetall]} from the renew script.
func parseRenew(res any) (driver.RenewReply, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) < 2 || len(arr) > 3 {
		return driver.RenewReply{}, fmt.Errorf("unexpected reply %T %v", res, res)
	}
	ttl, ok := arr[0].(int64)
	if !ok {
		return driver.RenewReply{}, fmt.Errorf("unexpected ttl %T", arr[0])
	}
	vs, ok := arr[1].(string)
	if !ok {
		return driver.RenewReply{}, fmt.Errorf("unexpected version %T", arr[1])
	}
	v, err := strconv.ParseUint(vs, 10, 64)
	if err != nil || v == 0 {
		return driver.RenewReply{}, fmt.Errorf("bad version %q", vs)
	}
	rep := driver.RenewReply{Remaining: pttl(ttl), Version: v}
	if len(arr) == 2 {
		return rep, nil
	}
	fields, ok := arr[2].([]any)
	if !ok || len(fields)%2 != 0 {
		return driver.RenewReply{}, fmt.Errorf("unexpected lease list %T", arr[2])
	}
	rep.Full = true
	rep.Leases = make([]driver.Lease, 0, max(0, len(fields)/2-2))
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		if strings.HasPrefix(name, "#") {
			continue // session metadata, not a lease
		}
		ts, _ := fields[i+1].(string)
		tok, err := strconv.ParseUint(ts, 10, 64)
		if err != nil || tok == 0 {
			return driver.RenewReply{}, fmt.Errorf("bad token %q for lease %q", ts, name)
		}
		rep.Leases = append(rep.Leases, driver.Lease{Name: name, Token: tok})
	}
	return rep, nil
}

// Acquire tries every valid name in one script call. Invalid names get a
// result whose Err wraps deadline.ErrInvalidName and are not sent.
//
// The script declares every key it reads (ADR 0131), so a lease owned by
// another session needs that session's key in the call: the backend keeps
// the owner it last saw per name and declares its key. A free name (the
// uncontended case) needs none. When a name's owner is not the expected one,
// the script answers with the owner and the backend asks again for those
// names with its key: at most [acquireTries] calls, after which a name whose
// owner keeps changing is answered as not acquired.
//
// During a quarantine after data loss (ADR 0130) the reply's Quarantine is
// the time left and no name is granted.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if !validID(req.ID) {
		return driver.AcquireReply{}, expired("acquire", req.ID)
	}
	results := make([]driver.AcquireResult, len(req.Names))
	pending := make([]int, 0, len(req.Names)) // indexes of results to send
	for i, name := range req.Names {
		results[i].Name = name
		if err := deadline.ValidateName(name); err != nil {
			results[i].Err = err
			continue
		}
		pending = append(pending, i)
	}
	for try := 1; len(pending) > 0; try++ {
		var q time.Duration
		var err error
		if pending, q, err = b.acquire(ctx, req, results, pending, try == acquireTries); err != nil {
			return driver.AcquireReply{}, err
		}
		if q > 0 {
			for i := range results {
				results[i].Token = 0
			}
			return driver.AcquireReply{Results: results, Quarantine: q}, nil
		}
	}
	return driver.AcquireReply{Results: results}, nil
}

// acquireTries bounds the script calls of one Acquire: the first, and
// retries for names whose owner changed since the backend last saw it.
const acquireTries = 3

// acquire runs the acquire script once for results[pending] and returns
// the indexes to try again (owner not declared), or the quarantine. On the
// last try, names to try again are left with token 0.
func (b *Backend) acquire(ctx context.Context, req driver.AcquireRequest, results []driver.AcquireResult, pending []int, lastTry bool) ([]int, time.Duration, error) {
	n := len(pending)
	ks := make([]string, 3, 3+n)
	ks[0], ks[1], ks[2] = b.keys.session+string(req.ID), b.keys.names, b.keys.epoch
	args := make([]any, 5, 5+2*n)
	args[0], args[1], args[2], args[3], args[4] = string(req.ID), b.argSession, b.argMaxLease, n, b.argRestart
	for _, i := range pending {
		ks = append(ks, b.keys.lease+req.Names[i])
		args = append(args, req.Names[i])
	}
	b.hintMu.Lock()
	for _, i := range pending {
		owner, ok := b.hints[req.Names[i]]
		if !ok || owner == req.ID {
			args = append(args, 0)
			continue
		}
		ks = append(ks, b.keys.session+string(owner))
		args = append(args, len(ks)) // Lua's KEYS index is 1-based
	}
	b.hintMu.Unlock()
	res, err := b.runAcquire(ctx, ks, args...).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redissimba: acquire: %w", err)
	}
	if n, ok := res.(int64); ok && n == -1 {
		return nil, 0, expired("acquire", req.ID)
	}
	out, ok := res.([]any)
	if ok && len(out) == 2 {
		if code, isInt := out[0].(int64); isInt {
			ms, _ := out[1].(int64)
			if code != -2 || ms <= 0 {
				return nil, 0, fmt.Errorf("redissimba: acquire: unexpected quarantine reply %v", out)
			}
			return nil, time.Duration(ms) * time.Millisecond, nil
		}
	}
	if !ok || len(out) != n {
		return nil, 0, fmt.Errorf("redissimba: acquire: unexpected reply %T with %d of %d results", res, len(out), n)
	}
	var again []int
	b.hintMu.Lock()
	defer b.hintMu.Unlock()
	if len(b.hints) > maxHints {
		clear(b.hints) // hints only save a call; keep their memory bounded
	}
	for j, i := range pending {
		s, _ := out[j].(string)
		name := req.Names[i]
		switch {
		case strings.HasPrefix(s, "-"), strings.HasPrefix(s, "?"):
			owner := driver.ID(s[1:])
			if !validID(owner) {
				return nil, 0, fmt.Errorf("redissimba: acquire: bad owner %q for %q", s, name)
			}
			b.hints[name] = owner
			if s[0] == '?' && !lastTry {
				again = append(again, i)
			}
		default:
			tok, err := strconv.ParseUint(s, 10, 64)
			if err != nil || tok == 0 {
				return nil, 0, fmt.Errorf("redissimba: acquire: bad token %q for %q", s, name)
			}
			results[i].Token = tok
			delete(b.hints, name)
		}
	}
	return again, 0, nil
}

// restartCheck is the acquire script's ARGV[5]: "1" to compare the
// epoch's run_id with the serving node's, "0" with WithoutRestartQuarantine.
func (b *Backend) restartCheck() string {
	if b.opts.noRestartCheck {
		return "0"
	}
	return "1"
}

// maxHints bounds the owners an Acquire remembers.
const maxHints = 1 << 14

// Init creates the namespace's epoch record (ADR 0130) with no quarantine
// if it is missing, and does nothing if it is there. A namespace whose
// epoch is missing cannot be told from one that lost its records, so
// without Init the first Acquire of a new namespace starts a quarantine of
// one maximum lease ([WithMaxLease]) in which no lease is granted.
//
// Call it only for a namespace never used before: a first deployment, a
// test. Called after a data loss (a FLUSHALL, a restart without
// persistence) before any Acquire noticed the loss, it disables that
// quarantine, and a session that still believes in a term from before the
// loss may overlap a new holder. Called during a quarantine it does
// nothing: the epoch is there.
func (b *Backend) Init(ctx context.Context) error {
	if err := initScript.Run(ctx, b.rdb, []string{b.keys.epoch}).Err(); err != nil {
		return fmt.Errorf("redissimba: init namespace %s: %w", b.ns, err)
	}
	return nil
}

// Release frees the leases the session owns under the given tokens in one
// script call, and publishes the names it freed that an Acquire was refused
// since their last notice (ADR 0147). A lease owned by another
// session or under another token is left alone.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if len(req.Leases) == 0 || !validID(req.ID) {
		return nil // an unknown session owns nothing
	}
	ks := make([]string, 1, len(req.Leases)+1)
	ks[0] = b.keys.session + string(req.ID)
	args := make([]any, 2, 2*len(req.Leases)+2)
	args[0], args[1] = string(req.ID), b.argChannel
	for _, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return fmt.Errorf("redissimba: release: %w", err)
		}
		ks = append(ks, b.keys.lease+l.Name)
		// go-redis writes a uint64 in decimal, the string the lease holds.
		args = append(args, l.Name, l.Token)
	}
	if err := releaseScript.Run(ctx, b.rdb, ks, args...).Err(); err != nil {
		return fmt.Errorf("redissimba: release: %w", err)
	}
	return nil
}

// Close deletes the session and frees every lease it still owns,
// publishing the names waited for (see [Backend.Release]). Closing an
// expired or unknown session is not an
// error. A session that owns nothing closes in one script call; one that
// owns leases takes a second, which declares their keys (ADR 0131).
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	if !validID(id) {
		return nil
	}
	var names []string
	for try := 0; ; try++ {
		ks := make([]string, 1, len(names)+1)
		ks[0] = b.keys.session + string(id)
		args := make([]any, 2, len(names)+2)
		args[0], args[1] = string(id), b.argChannel
		for _, n := range names {
			ks = append(ks, b.keys.lease+n)
			args = append(args, n)
		}
		res, err := closeScript.Run(ctx, b.rdb, ks, args...).Result()
		if err != nil {
			return fmt.Errorf("redissimba: close: %w", err)
		}
		more, ok := res.([]any)
		if !ok {
			return nil
		}
		if try == closeTries {
			return fmt.Errorf("redissimba: close: session %s: its owned set kept changing over %d calls", id, closeTries)
		}
		names = names[:0]
		for _, f := range more[1:] {
			n, _ := f.(string)
			if deadline.ValidateName(n) != nil {
				return fmt.Errorf("redissimba: close: session %s lists %q, not a lease name", id, n)
			}
			names = append(names, n)
		}
	}
}

// closeTries bounds the retries of one Close; the engine stops acquiring
// before it closes, so the owned set changes only by a racing call.
const closeTries = 3
