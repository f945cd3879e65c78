package redissimba

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrServerUnsupported is wrapped by the error of the first [Backend.Open]
// (and of [Backend.CheckServer]) on a Redis older than 5.0, whose scripts
// cannot call TIME before a write: tokens and expiry need it.
var ErrServerUnsupported = errors.New("redissimba: unsupported redis server")

// ErrServerUnsafe is wrapped by the error of [Backend.CheckServer] (so of
// the first [Backend.Open]), of [Backend.Init], and of an Acquire that
// would grant a lease, on a server whose settings can make a live owner's
// lease look free: a memory limit (maxmemory) with a maxmemory-policy
// other than noeviction, which may evict a live session's key (every
// volatile-* policy: session keys are the ones with a TTL) or a lease key
// (every allkeys-* policy); and, for an Acquire, a node that is a replica.
// The message names the setting and the value to use (ADR 0164).
var ErrServerUnsafe = errors.New("redissimba: server settings break exclusion")

// unsafeServer wraps ErrServerUnsafe around the scripts' refusals of an
// unsafe server (SIMBA_EVICTION, SIMBA_REPLICA); other errors pass as they
// are.
func unsafeServer(err error) error {
	if isRedisError(err) {
		if msg := err.Error(); strings.HasPrefix(msg, "SIMBA_EVICTION ") || strings.HasPrefix(msg, "SIMBA_REPLICA ") {
			return fmt.Errorf("%w: %s", ErrServerUnsafe, msg[strings.IndexByte(msg, ' ')+1:])
		}
	}
	return err
}

// minMajor is the oldest Redis major version the scripts run on.
const minMajor = 5

// CheckServer reads the server's version and configuration, as the first
// Open does, and returns what an operator should fix. A memory limit
// (maxmemory) with a maxmemory-policy other than noeviction is an error
// wrapping [ErrServerUnsafe]: an evicted session or lease key would make a
// live owner's lease look free, which no quarantine sees (ADR 0164). The
// warnings: such a policy without a limit, persistence that can restart from an older
// state (RDB snapshots alone, or an AOF not fsynced on every write: the
// epoch's run_id makes every such restart a quarantine of one maximum
// lease, and with [WithoutRestartQuarantine] a restart that lost leases
// granted since goes unnoticed), no persistence (a restart loses every
// lease: the quarantine then refuses every lease for one maximum lease),
// and replicas without min-replicas-to-write (a failover is a quarantine,
// or, with WithoutRestartQuarantine, data loss the quarantine does not
// see). A server older than 5.0 is an error wrapping
// [ErrServerUnsupported]. Settings the server refuses to show (CONFIG
// disabled, as on some managed services) are reported as warnings to check
// by hand.
//
// The first Open (and Init) runs the same check and logs its warnings
// through [WithLogger]'s logger, unless the application called
// CheckServer itself first: the warnings are then the application's to
// report, and are not logged a second time.
func (b *Backend) CheckServer(ctx context.Context) (warnings []string, err error) {
	warnings, err = b.checkServer(ctx)
	if err == nil {
		b.checked.Store(true)
	}
	return warnings, err
}

func (b *Backend) checkServer(ctx context.Context) (warnings []string, err error) {
	info, err := b.rdb.Info(ctx, "server", "persistence", "replication", "memory").Result()
	if err != nil {
		if isRedisError(err) && strings.HasPrefix(err.Error(), "NOPERM") {
			// The acquire reads INFO too (run_id, replication, memory):
			// without it no lease can be granted. Say so at start.
			return nil, fmt.Errorf("%w: INFO is refused to this user (%v): Simba reads INFO server, replication and memory at start and in every acquire to notice restarts, failovers and an evicting policy; allow it (ACL SETUSER <user> +info)", ErrServerUnsafe, err)
		}
		return nil, fmt.Errorf("redissimba: check server: %w", err)
	}
	fields := parseInfo(info)
	if err := checkVersion(fields["redis_version"]); err != nil {
		return nil, err
	}
	// INFO, not CONFIG GET: managed services that hide CONFIG show it, and
	// the acquire script reads the same fields before every grant.
	switch policy, limit := fields["maxmemory_policy"], fields["maxmemory"]; {
	case policy == "" || limit == "":
		return nil, fmt.Errorf("%w: INFO memory shows no maxmemory_policy or maxmemory, so Simba cannot tell whether Redis may evict a live session", ErrServerUnsafe)
	case policy == "noeviction":
	case limit != "0":
		return nil, fmt.Errorf("%w: maxmemory-policy %s with maxmemory %s: under memory pressure Redis may evict a live session's key (volatile-*: sessions are the keys with a TTL) or a lease key (allkeys-*), and another session would take that lease while its owner still holds it; set maxmemory-policy noeviction (or maxmemory 0)", ErrServerUnsafe, policy, limit)
	default:
		warnings = append(warnings, fmt.Sprintf("maxmemory-policy %s with maxmemory 0: nothing is evicted now, but setting a memory limit would make every grant fail (ErrServerUnsafe); set maxmemory-policy noeviction", policy))
	}
	if fields["run_id"] == "" && !b.opts.noRestartCheck {
		warnings = append(warnings, "INFO server shows no run_id: every Acquire will fail (the acquire script compares it with the epoch's to notice a restart); use a server that shows it")
	}
	// What a restart that brings back an older state does to the namespace.
	older := "the epoch's run_id makes the restarted server quarantine the namespace for one maximum lease (" + b.opts.maxLease.String() + ") after every crash"
	if b.opts.noRestartCheck {
		older = "and WithoutRestartQuarantine is set, so the quarantine does not start while a session that lost its lease still believes in it: remove WithoutRestartQuarantine"
	}
	save, err := b.config(ctx, "save")
	switch {
	case err != nil:
		warnings = append(warnings, fmt.Sprintf("cannot read the save setting (%v): make sure a restart loses no acknowledged write (appendonly yes, appendfsync always) or loses everything (no persistence)", err))
	case fields["aof_enabled"] == "1":
		// A restart replays the AOF: only what was fsynced survives.
		if f, err := b.config(ctx, "appendfsync"); err != nil {
			warnings = append(warnings, fmt.Sprintf("cannot read appendfsync (%v): make sure it is always", err))
		} else if f != "always" {
			warnings = append(warnings, fmt.Sprintf("appendonly yes with appendfsync %s: a crash restarts without the last writes (up to a second with everysec) but with the epoch key; %s; set appendfsync always to lose no acknowledged write", f, older))
		}
	case strings.TrimSpace(save) != "":
		warnings = append(warnings, fmt.Sprintf("persistence by RDB snapshots only (save %q, appendonly no): a crash restarts from the last snapshot, which has the epoch key but not the leases and renewals since; %s; set appendonly yes with appendfsync always to lose no acknowledged write", save, older))
	default:
		warnings = append(warnings, fmt.Sprintf("no persistence (appendonly no, save \"\"): a restart loses every session and lease, as a FLUSHALL would, and the quarantine then grants no lease for one maximum lease (%v)", b.opts.maxLease))
	}
	if n, _ := strconv.Atoi(fields["connected_slaves"]); fields["role"] == "master" && n > 0 {
		warnings = append(warnings, b.replicaWarnings(ctx, fields, n)...)
	}
	return warnings, nil
}

// replicaWarnings says what n replicas of a master mean for exclusion.
// The quarantine covers a promoted replica's missing records, not a split
// brain: a master cut off from Sentinel with some of its clients, while a
// replica is promoted on the other side, goes on renewing their sessions,
// and the promoted node grants their leases once its quarantine ends: two
// holders for as long as the partition lasts (ADR 0216). Only the old
// master refusing writes (min-replicas-to-write as high as the replicas it
// may be cut from, min-replicas-max-lag + 2 s below the failover delay) or
// WithWaitReplicas for every replica ends their terms. A Cluster master in
// the minority stops taking writes after cluster-node-timeout, before a
// replica can be promoted: no warning there.
func (b *Backend) replicaWarnings(ctx context.Context, fields map[string]string, n int) []string {
	var out []string
	m, err := b.config(ctx, "min-replicas-to-write")
	m = strings.TrimSpace(m)
	if b.opts.noRestartCheck && err == nil && m == "0" && b.opts.waitReplicas < n {
		out = append(out, fmt.Sprintf("%d replica(s), min-replicas-to-write 0 and WithoutRestartQuarantine: a failover to a replica that missed writes is data loss the quarantine does not detect (the epoch key survives there); use WithWaitReplicas, or remove WithoutRestartQuarantine", n))
	}
	if fields["redis_mode"] == "cluster" || b.opts.waitReplicas >= n {
		return out
	}
	fix := fmt.Sprintf("set min-replicas-to-write %d with min-replicas-max-lag + 2 s below the failover delay (Sentinel's down-after-milliseconds), or use WithWaitReplicas(%d, timeout)", n, n)
	switch k, cerr := strconv.Atoi(m); {
	case err != nil || cerr != nil:
		out = append(out, fmt.Sprintf("%d replica(s), and min-replicas-to-write cannot be read (%v): if a replica is promoted while this master still serves clients on its side of a partition, their holders renew here while the promoted replica grants their leases after its quarantine (two holders); %s", n, err, fix))
	case k < n:
		out = append(out, fmt.Sprintf("%d replica(s) and min-replicas-to-write %d: if a replica is promoted (Sentinel) while this master still serves clients on its side of a partition with %d replica(s), their holders renew here while the promoted replica grants their leases after its quarantine: two holders for as long as the partition lasts; %s", n, k, k, fix))
	}
	return out
}

func (b *Backend) config(ctx context.Context, name string) (string, error) {
	m, err := b.rdb.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s answered %v", name, m)
	}
	return v, nil
}

// parseInfo reads the "key:value" lines of an INFO reply.
func parseInfo(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// checkVersion accepts "major.minor.patch" with major >= 5.
func checkVersion(v string) error {
	majorText, _, _ := strings.Cut(v, ".")
	major, err := strconv.Atoi(majorText)
	switch {
	case err != nil || major <= 0:
		return fmt.Errorf("%w: cannot read the version from INFO (redis_version %q)", ErrServerUnsupported, v)
	case major < minMajor:
		return fmt.Errorf("%w: Redis %s is older than %d.0, whose scripts may call TIME before writing", ErrServerUnsupported, v, minMajor)
	}
	return nil
}

// checkOnce runs the server check before the backend's first session (or
// Init), logging its warnings once; until it succeeds, every Open tries
// again. An application that called CheckServer has the warnings already.
func (b *Backend) checkOnce(ctx context.Context) error {
	if b.checked.Load() {
		return nil
	}
	b.checkMu.Lock()
	defer b.checkMu.Unlock()
	if b.checked.Load() {
		return nil
	}
	warnings, err := b.checkServer(ctx)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		b.opts.log.Warn("redissimba: "+w, "namespace", b.ns)
	}
	b.checked.Store(true)
	return nil
}
