package redissimba

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrReplicaLag is wrapped by the error of an Open, Renew or Acquire whose
// writes fewer replicas acknowledged than [WithWaitReplicas] asks: the
// engine treats it as a failed call, so it believes neither the grant nor
// the renewal.
var ErrReplicaLag = errors.New("redissimba: replicas did not acknowledge the write in time")

// WithWaitReplicas makes every Open, Renew and Acquire wait until n
// replicas have acknowledged its writes (Redis WAIT, at most timeout)
// before the backend reports it; with fewer, the call fails with an error
// wrapping [ErrReplicaLag]. The WAIT travels in the same pipeline and on
// the same connection as the script, so it adds no round trip, only the
// replicas' latency.
//
// It covers the data loss the quarantine cannot see: a failover (Sentinel,
// Cluster) to a replica that missed writes, where the epoch key survives.
// Every grant and renewal the engine believes is then on n replicas, so a
// promoted replica among them has it. With n equal to the number of
// replicas any promoted replica has it; with fewer, only the replicas that
// acknowledged, which Sentinel prefers (the highest replication offset) but
// does not guarantee. Releases and closes do not wait: losing one only
// delays the next holder. The hosts' clocks must agree well within the
// engine's margin: a replica expires sessions by its own clock once
// promoted. n = 0 (the default) waits for nothing.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(o *options) { o.waitReplicas, o.waitTimeout = n, timeout }
}

// run runs script s on the keys' node and, with WithWaitReplicas, a WAIT
// in the same pipeline on the same connection (WAIT counts the writes of
// its own connection).
func (b *Backend) run(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if b.opts.waitReplicas == 0 {
		return s.Run(ctx, b.rdb, keys, args...)
	}
	var node redis.Cmdable = b.uc
	if cc, ok := b.uc.(*redis.ClusterClient); ok {
		// A keyless WAIT would go to any node: pipeline on the node that
		// serves the keys' slot.
		c, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		node = c
	}
	cmd, err := b.runWaiting(ctx, node, s, keys, args, false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd, err = b.runWaiting(ctx, node, s, keys, args, true)
	}
	if err != nil && cmd.Err() == nil {
		cmd.SetErr(err)
	}
	return cmd
}

func (b *Backend) runWaiting(ctx context.Context, node redis.Cmdable, s *redis.Script, keys []string, args []any, load bool) (*redis.Cmd, error) {
	var cmd *redis.Cmd
	var wait *redis.IntCmd
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if load {
			cmd = s.Eval(ctx, p, keys, args...)
		} else {
			cmd = s.EvalSha(ctx, p, keys, args...)
		}
		wait = redis.NewIntCmd(ctx, "wait", b.opts.waitReplicas, max(1, b.opts.waitTimeout.Milliseconds())) // WAIT n 0 would block forever
		_ = p.Process(ctx, wait)
		return nil
	})
	if cmd.Err() != nil {
		return cmd, cmd.Err()
	}
	if err != nil {
		return cmd, err
	}
	if n := wait.Val(); n < int64(b.opts.waitReplicas) {
		return cmd, fmt.Errorf("%w: %d of %d replicas within %v", ErrReplicaLag, n, b.opts.waitReplicas, b.opts.waitTimeout)
	}
	return cmd, nil
}
