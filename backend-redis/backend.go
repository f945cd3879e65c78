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
	checked atomic.Bool // CheckServer passed, called by the application or by checkOnce

	hintMu sync.Mutex
	hints  map[string]driver.ID // name → its owner when last seen, see Acquire

	noFunctions atomic.Bool // the server refused the acquire function: use the script (functions.go)

	// Script arguments that never change, boxed once: an any made from a
	// string or an int64 on every call is an allocation each.
	argSession, argChannel, argMaxLease, argRestart, argQuarantine any
	argNames, argEpoch, argHW, argLineage                          any // keys
	sessions                                                       sessionArgs

	acquires atomic.Uint64 // Acquire calls, for the sweep's rate (sweep.go)
	sweepMu  sync.Mutex    // one sweep step at a time; guards sweepAt
	sweepAt  string        // the last name the sweep looked at ("": start over)
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
	maxLockDelay     time.Duration
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

// WithMaxLockDelay lets Acquire requests ask for a lock-delay of up to d
// (driver.AcquireRequest.LockDelay, rounded up to whole milliseconds):
// when a term granted with a delay ends without a release or a close (its
// session expired), the first candidate, or the sweep, that finds the
// owner's session key gone records Redis TIME in the lease, and the name
// stays refused until d has passed on the Redis clock since then: at least
// d after the session really ended (ADR 0246). A request above d, or
// negative, is refused whole with an error wrapping driver.ErrLockDelay.
// The quarantine after a data loss lasts the maximum lease plus d, since a
// loss loses the delays too. Every process of a namespace must use the
// same value, like [WithMaxLease]. The default, 0, refuses every positive
// delay.
func WithMaxLockDelay(d time.Duration) Option {
	return func(o *options) { o.maxLockDelay = d }
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
	if o.maxLockDelay < 0 {
		return nil, fmt.Errorf("redissimba: WithMaxLockDelay(%v): want ≥ 0", o.maxLockDelay)
	}
	if o.waitReplicas < 0 || o.waitReplicas > 0 && o.waitTimeout <= 0 {
		return nil, fmt.Errorf("redissimba: WithWaitReplicas(%d, %v): want n ≥ 0 and, with n > 0, a timeout > 0 (WAIT 0 would block forever)", o.waitReplicas, o.waitTimeout)
	}
	b := &Backend{rdb: rdb, uc: rdb, ns: ns, keys: newKeys(ns), opts: o, hints: map[string]driver.ID{}}
	b.argSession, b.argChannel, b.argMaxLease, b.argRestart = b.keys.session, b.keys.channel, b.maxLeaseMS(), b.restartCheck()
	b.argQuarantine = b.quarantineMS()
	b.argNames, b.argEpoch, b.argHW, b.argLineage = b.keys.names, b.keys.epoch, b.keys.hw, b.keys.lineage
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

// quarantineMS is the length of the quarantine after a data loss: one
// maximum lease plus the maximum lock-delay, so that a holder paused
// across the loss is covered by the delay it asked for too.
func (b *Backend) quarantineMS() int64 { return millis(b.opts.maxLease) + millis(b.opts.maxLockDelay) }

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
	if req.LockDelay < 0 || req.LockDelay > b.opts.maxLockDelay {
		return driver.AcquireReply{}, fmt.Errorf("redissimba: acquire: lock-delay %v: %w: want 0 to %v (WithMaxLockDelay)", req.LockDelay, driver.ErrLockDelay, b.opts.maxLockDelay)
	}
	if !validID(req.ID) {
		return driver.AcquireReply{}, expired("acquire", req.ID)
	}
	if b.acquires.Add(1)%sweepEvery == 0 {
		defer b.sweepStep(ctx)
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
		var why string
		var err error
		if pending, q, why, err = b.acquire(ctx, req, results, pending, try == acquireTries); err != nil {
			return driver.AcquireReply{}, err
		}
		if q > 0 {
			for i := range results {
				results[i].Token = 0
			}
			return driver.AcquireReply{Results: results, Quarantine: q, QuarantineHint: quarantineHint(why, b.opts.maxLease)}, nil
		}
	}
	return driver.AcquireReply{Results: results}, nil
}

// acquireTries bounds the script calls of one Acquire: the first, and
// retries for names whose owner changed since the backend last saw it.
const acquireTries = 3

// acquire runs the acquire script once for results[pending] and returns
// the indexes to try again (owner not declared), or the quarantine and
// what started it (the script's why). On the last try, names to try again
// are left with token 0.
func (b *Backend) acquire(ctx context.Context, req driver.AcquireRequest, results []driver.AcquireResult, pending []int, lastTry bool) ([]int, time.Duration, string, error) {
	n := len(pending)
	// The owner last seen per name ("": none, or this session), whose
	// session key the call declares.
	var one [1]driver.ID
	owners := one[:0]
	hinted := 0
	b.hintMu.Lock()
	for _, i := range pending {
		owner, ok := b.hints[req.Names[i]]
		if !ok || owner == req.ID {
			owner = ""
		} else {
			hinted++
		}
		owners = append(owners, owner)
	}
	b.hintMu.Unlock()
	nk := 5 + n + hinted
	argv := newArgv(nk, 7+2*n)
	sk, sid := b.sessions.get(b.keys.session, req.ID)
	argv = append(argv, sk, b.argNames, b.argEpoch)
	for _, i := range pending {
		argv = append(argv, b.keys.lease+req.Names[i])
	}
	for _, owner := range owners {
		if owner != "" {
			argv = append(argv, b.keys.session+string(owner))
		}
	}
	argv = append(argv, b.argHW, b.argLineage) // last: the script finds them at KEYS[#KEYS - 1] and KEYS[#KEYS]
	argv = append(argv, sid, b.argSession, b.argMaxLease, n, b.argRestart)
	for _, i := range pending {
		argv = append(argv, req.Names[i])
	}
	k := 3 + n // Lua's KEYS index of the last key before the next hint's (1-based)
	for _, owner := range owners {
		if owner == "" {
			argv = append(argv, 0)
			continue
		}
		k++
		argv = append(argv, k)
	}
	argv = append(argv, b.argQuarantine, millis(req.LockDelay))
	res, err := b.runAcquire(ctx, argv).Result()
	if err != nil {
		return nil, 0, "", fmt.Errorf("redissimba: acquire: %w", unsafeServer(err))
	}
	if n, ok := res.(int64); ok && n == -1 {
		return nil, 0, "", expired("acquire", req.ID)
	}
	out, ok := res.([]any)
	if ok && (len(out) == 2 || len(out) == 3) {
		if code, isInt := out[0].(int64); isInt {
			ms, _ := out[1].(int64)
			if code != -2 || ms <= 0 {
				return nil, 0, "", fmt.Errorf("redissimba: acquire: unexpected quarantine reply %v", out)
			}
			var why string
			if len(out) == 3 {
				why, _ = out[2].(string)
			}
			return nil, time.Duration(ms) * time.Millisecond, why, nil
		}
	}
	if !ok || len(out) != n {
		return nil, 0, "", fmt.Errorf("redissimba: acquire: unexpected reply %T with %d of %d results", res, len(out), n)
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
				return nil, 0, "", fmt.Errorf("redissimba: acquire: bad owner %q for %q", s, name)
			}
			b.hints[name] = owner
			if s[0] == '?' && !lastTry {
				again = append(again, i)
			}
		default:
			tok, err := strconv.ParseUint(s, 10, 64)
			if err != nil || tok == 0 {
				return nil, 0, "", fmt.Errorf("redissimba: acquire: bad token %q for %q", s, name)
			}
			results[i].Token = tok
			delete(b.hints, name)
		}
	}
	return again, 0, "", nil
}

// quarantineHint says what a quarantine's why means and what to do, for
// the engine's error (driver.AcquireReply.QuarantineHint).
func quarantineHint(why string, maxLease time.Duration) string {
	switch why {
	case "missing":
		return "the namespace has no epoch record: either it is new or it lost its records (a restart without persistence, FLUSHALL), and nothing tells the two apart; for a new namespace run Init once (redissimba Backend.Init, or simba --backend URL init) before its first use to skip this wait"
	case "lost":
		return fmt.Sprintf("the namespace's epoch record is gone but its name index is not: it lost records (deleted or evicted keys); no lease is granted until every term granted before ended (%v)", maxLease)
	case "garbled":
		return "the namespace's epoch record is garbled: treated as lost"
	case "server":
		return "the epoch was written by another Redis process (a restart, a failover, a Cluster slot move): leases granted since may be lost"
	case "history":
		return "the dataset's replication history changed since the epoch was written (a failover, or a failover and back): leases granted since may be lost"
	case "unrecorded":
		return "the epoch has no lineage record (written by an earlier version of this package, or the record was lost): one quarantine records it"
	}
	return ""
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
// when it is missing and the server shows no sign that the namespace's
// records may have been lost within one maximum lease ([WithMaxLease]);
// it does nothing when the epoch is there (a quarantine it holds runs on).
// A namespace whose epoch is missing cannot be told from one that lost its
// records, so without Init the first Acquire of a new namespace starts a
// quarantine of one maximum lease in which no lease is granted.
//
// Init is safe to run at every deployment or start (ADR 0165): it never
// ends or shortens a quarantine and never skips one the server gives a
// reason for. It refuses, writing nothing, with an error wrapping
// [driver.ErrInitUnsafe] that names the sign and what to do, when the
// epoch is missing and: the server started less than one maximum lease
// ago, whatever its persistence (a restart without persistence, or with
// an AOF lost with a container's disk, looks like that); the node was promoted from a replica since
// it started (master_replid2 set); FLUSHALL, FLUSHDB or SWAPDB ran since
// the server started; records of an earlier epoch are there (its lineage key or name
// index); or the node is a replica. After a refusal the first Acquire
// quarantines the namespace, which is always safe. It also runs the server
// check ([Backend.CheckServer]) and fails as it does.
//
// Not detected: the namespace's keys deleted one by one (DEL, UNLINK) on a
// server that has been up for a maximum lease, without a FLUSHALL; Init
// then skips that loss's quarantine. The checks are sized by the backend's
// maximum lease plus its maximum lock-delay ([WithMaxLockDelay]), the
// length of a quarantine: both must be the applications' (ADR 0217).
func (b *Backend) Init(ctx context.Context) error {
	return b.init(ctx, true)
}

// ForceInit creates the namespace's epoch record with no quarantine when it
// is missing, whatever the server shows; it does nothing when the epoch is
// there (it never ends a running quarantine). It is for the operator who
// knows what [Backend.Init] cannot: that no process of the namespace has
// held a lease within one maximum lease ([WithMaxLease]), because the
// namespace was never used (a new server, a test) or every process using
// it has been stopped for that long. Called after a loss while a holder
// still believes in its term, it lets a new holder overlap it.
func (b *Backend) ForceInit(ctx context.Context) error {
	return b.init(ctx, false)
}

func (b *Backend) init(ctx context.Context, check bool) error {
	if err := b.checkOnce(ctx); err != nil {
		return fmt.Errorf("redissimba: init namespace %s: %w", b.ns, err)
	}
	mode := "0"
	if check {
		mode = "1"
	}
	secs := int64((b.opts.maxLease + b.opts.maxLockDelay + time.Second - 1) / time.Second)
	res, err := initScript.Run(ctx, b.rdb, []string{b.keys.epoch, b.keys.lineage, b.keys.names, b.keys.hw}, mode, secs).Slice()
	if err != nil {
		return fmt.Errorf("redissimba: init namespace %s: %w", b.ns, err)
	}
	code, _ := res[0].(int64)
	if code >= 0 {
		return nil
	}
	sign, _ := res[1].(string)
	var detail string
	if len(res) > 2 {
		detail, _ = res[2].(string)
	}
	return fmt.Errorf("redissimba: init namespace %s: %w: %s; nothing was written: the namespace's first Acquire will start a quarantine of one maximum lease (%v), which is safe; if no process of this namespace has held a lease within %v (the namespace was never used, or every process using it has been stopped that long), ForceInit (simba init --force) skips it",
		b.ns, driver.ErrInitUnsafe, initSign(sign, detail, b.opts.maxLease), b.opts.maxLease, b.opts.maxLease)
}

// initSign explains a sign of the init script.
func initSign(sign, detail string, maxLease time.Duration) string {
	switch sign {
	case "replica":
		return "the node serving the namespace is a replica (point the client at the master)"
	case "records":
		return "the epoch is missing but records of an earlier one are there (the lineage key or the name index): the epoch alone was lost"
	case "young":
		return fmt.Sprintf("the server started %ss ago, less than one maximum lease (%v): a restart that lost the namespace's records looks the same, whatever the persistence shows now (an AOF lost with a container's disk, or turned on after the restart)", detail, maxLease)
	case "promoted":
		return fmt.Sprintf("the server was promoted from a replica since it started (master_replid2 %s): a replica that missed the namespace's writes looks the same", detail)
	case "flushed":
		return fmt.Sprintf("FLUSHALL, FLUSHDB or SWAPDB ran %s time(s) since the server started (INFO commandstats; CONFIG RESETSTAT clears the count once you know it did not lose this namespace)", detail)
	}
	return fmt.Sprintf("sign %q (%s)", sign, detail)
}

// Release frees the leases the session owns under the given tokens in one
// script call, and publishes the names it freed that an Acquire was refused
// since their last notice (ADR 0147). A lease owned by another
// session or under another token is left alone.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if len(req.Leases) == 0 || !validID(req.ID) {
		return nil // an unknown session owns nothing
	}
	argv := newArgv(len(req.Leases)+2, 2+2*len(req.Leases))
	sk, sid := b.sessions.get(b.keys.session, req.ID)
	argv = append(argv, sk)
	for _, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return fmt.Errorf("redissimba: release: %w", err)
		}
		argv = append(argv, b.keys.lease+l.Name)
	}
	argv = append(argv, b.argNames, sid, b.argChannel) // the name index last: the script finds it at KEYS[#KEYS]
	for _, l := range req.Leases {
		// go-redis writes a uint64 in decimal, the string the lease holds.
		argv = append(argv, l.Name, l.Token)
	}
	if err := b.runArgv(ctx, releaseScript, argv).Err(); err != nil {
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
	sk, sid := b.sessions.get(b.keys.session, id)
	var names []string
	for try := 0; ; try++ {
		argv := newArgv(len(names)+2, 2+len(names))
		argv = append(argv, sk)
		for _, n := range names {
			argv = append(argv, b.keys.lease+n)
		}
		argv = append(argv, b.argNames, sid, b.argChannel) // the name index last: the script finds it at KEYS[#KEYS]
		for _, n := range names {
			argv = append(argv, n)
		}
		res, err := b.runArgv(ctx, closeScript, argv).Result()
		if err != nil {
			return fmt.Errorf("redissimba: close: %w", err)
		}
		more, ok := res.([]any)
		if !ok {
			b.sessions.forget(id)
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
