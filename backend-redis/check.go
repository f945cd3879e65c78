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

// minMajor is the oldest Redis major version the scripts run on.
const minMajor = 5

// CheckServer reads the server's version and configuration, as the first
// Open does, and returns what an operator should fix: an eviction policy
// other than noeviction (an evicted session or lease key is data loss the
// quarantine does not see), persistence that can restart from an older
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
func (b *Backend) CheckServer(ctx context.Context) (warnings []string, err error) {
	info, err := b.rdb.Info(ctx, "server", "persistence", "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("redissimba: check server: %w", err)
	}
	fields := parseInfo(info)
	if err := checkVersion(fields["redis_version"]); err != nil {
		return nil, err
	}
	if p, err := b.config(ctx, "maxmemory-policy"); err != nil {
		warnings = append(warnings, fmt.Sprintf("cannot read maxmemory-policy (%v): make sure it is noeviction", err))
	} else if p != "noeviction" {
		warnings = append(warnings, fmt.Sprintf("maxmemory-policy is %s: under memory pressure Redis may evict session and lease keys, which is data loss the quarantine does not detect unless the epoch key goes too; set noeviction", p))
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
		if m, err := b.config(ctx, "min-replicas-to-write"); err == nil && strings.TrimSpace(m) == "0" {
			if b.opts.noRestartCheck {
				warnings = append(warnings, fmt.Sprintf("%d replica(s), min-replicas-to-write 0 and WithoutRestartQuarantine: a failover to a replica that missed writes is data loss the quarantine does not detect (the epoch key survives there); use WithWaitReplicas, or remove WithoutRestartQuarantine", n))
			} else {
				warnings = append(warnings, fmt.Sprintf("%d replica(s) and min-replicas-to-write 0: a failover to a replica that missed writes is quarantined for one maximum lease (the promoted replica's run_id differs from the epoch's), as every failover is; set min-replicas-to-write 1 and min-replicas-max-lag well under the lease to lose fewer writes", n))
			}
		}
	}
	return warnings, nil
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

// checkOnce runs CheckServer before the backend's first session, logging
// its warnings; until it succeeds, every Open tries again.
func (b *Backend) checkOnce(ctx context.Context) error {
	b.checkMu.Lock()
	defer b.checkMu.Unlock()
	if b.checked {
		return nil
	}
	warnings, err := b.CheckServer(ctx)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		b.opts.log.Warn("redissimba: "+w, "namespace", b.ns)
	}
	b.checked = true
	return nil
}
