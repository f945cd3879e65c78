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
	ns   string
	keys keys
	opts options

	mu   sync.Mutex // guards sub
	sub  *subscription
	next uint64 // id of the last subscriber
	shut bool   // Shutdown was called: Subscribe refuses

	checkMu sync.Mutex
	checked bool // CheckServer passed (checkOnce)
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
	return &Backend{rdb: rdb, ns: ns, keys: newKeys(ns), opts: o}, nil
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
// lease is rounded up to whole milliseconds, the unit of PEXPIRE.
func (b *Backend) Open(ctx context.Context, req driver.OpenRequest) (driver.OpenReply, error) {
	if req.LeaseDuration <= 0 {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: lease duration %v, want > 0", req.LeaseDuration)
	}
	if err := b.checkOnce(ctx); err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	ms := (req.LeaseDuration + time.Millisecond - 1) / time.Millisecond
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: session id: %w", err)
	}
	id := driver.ID(hex.EncodeToString(raw[:]))
	owner, err := encodeOwner(req.Owner)
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	ttl, err := openScript.Run(ctx, b.rdb, []string{b.keys.session + string(id)}, int64(ms), owner).Int64()
	if err != nil {
		return driver.OpenReply{}, fmt.Errorf("redissimba: open: %w", err)
	}
	return driver.OpenReply{ID: id, Remaining: pttl(ttl)}, nil
}

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

// Renew extends the session by its lease with one script call, whatever
// the number of leases it owns. The reply lists the owned leases only when
// their version differs from req.KnownVersion.
func (b *Backend) Renew(ctx context.Context, req driver.RenewRequest) (driver.RenewReply, error) {
	if !validID(req.ID) {
		return driver.RenewReply{}, expired("renew", req.ID)
	}
	res, err := renewScript.Run(ctx, b.rdb, []string{b.keys.session + string(req.ID)},
		strconv.FormatUint(req.KnownVersion, 10)).Result()
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
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.AcquireReply, error) {
	if !validID(req.ID) {
		return driver.AcquireReply{}, expired("acquire", req.ID)
	}
	results := make([]driver.AcquireResult, len(req.Names))
	ks := make([]string, 2, len(req.Names)+2)
	ks[0], ks[1] = b.keys.session+string(req.ID), b.keys.names
	args := make([]any, 2, len(req.Names)+2)
	args[0], args[1] = string(req.ID), b.keys.session
	sent := make([]int, 0, len(req.Names)) // indexes of results sent to Redis
	for i, name := range req.Names {
		results[i].Name = name
		if err := deadline.ValidateName(name); err != nil {
			results[i].Err = err
			continue
		}
		ks = append(ks, b.keys.lease+name)
		args = append(args, name)
		sent = append(sent, i)
	}
	res, err := acquireScript.Run(ctx, b.rdb, ks, args...).Result()
	if err != nil {
		return driver.AcquireReply{}, fmt.Errorf("redissimba: acquire: %w", err)
	}
	if n, ok := res.(int64); ok && n < 0 {
		return driver.AcquireReply{}, expired("acquire", req.ID)
	}
	toks, ok := res.([]any)
	if !ok || len(toks) != len(sent) {
		return driver.AcquireReply{}, fmt.Errorf("redissimba: acquire: unexpected reply %T with %d of %d tokens", res, len(toks), len(sent))
	}
	for j, i := range sent {
		s, _ := toks[j].(string)
		tok, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return driver.AcquireReply{}, fmt.Errorf("redissimba: acquire: bad token %q for %q", s, req.Names[i])
		}
		results[i].Token = tok
	}
	return driver.AcquireReply{Results: results}, nil
}

// Release frees the leases the session owns under the given tokens in one
// script call, and publishes the names it freed. A lease owned by another
// session or under another token is left alone.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) error {
	if len(req.Leases) == 0 || !validID(req.ID) {
		return nil // an unknown session owns nothing
	}
	ks := make([]string, 1, len(req.Leases)+1)
	ks[0] = b.keys.session + string(req.ID)
	args := make([]any, 2, 2*len(req.Leases)+2)
	args[0], args[1] = string(req.ID), b.keys.channel
	for _, l := range req.Leases {
		if err := deadline.ValidateName(l.Name); err != nil {
			return fmt.Errorf("redissimba: release: %w", err)
		}
		ks = append(ks, b.keys.lease+l.Name)
		args = append(args, l.Name, strconv.FormatUint(l.Token, 10))
	}
	if err := releaseScript.Run(ctx, b.rdb, ks, args...).Err(); err != nil {
		return fmt.Errorf("redissimba: release: %w", err)
	}
	return nil
}

// Close deletes the session and frees every lease it still owns in one
// script call, publishing their names. Closing an expired or unknown
// session is not an error.
func (b *Backend) Close(ctx context.Context, id driver.ID) error {
	if !validID(id) {
		return nil
	}
	err := closeScript.Run(ctx, b.rdb, []string{b.keys.session + string(id)},
		string(id), b.keys.lease, b.keys.channel).Err()
	if err != nil {
		return fmt.Errorf("redissimba: close: %w", err)
	}
	return nil
}
