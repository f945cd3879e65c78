package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/deadline"
)

const ttl = 15 * time.Second // the default lease duration of Simba, for every library

func redisSetup(ctx context.Context, ns string, t targets) (*backend, error) {
	addr, err := need("SIMBA_REDIS_ADDR", t.redis)
	if err != nil {
		return nil, err
	}
	var cl closers
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	cl.add(func() { _ = rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		cl.run()
		return nil, err
	}
	b, err := redissimba.New(rdb, ns)
	if err != nil {
		cl.run()
		return nil, err
	}
	// A fresh namespace: create it, or the first acquire waits out the
	// quarantine of a lost one (ADR 0130).
	// A private server is seconds old and Init refuses it (a restart that
	// lost records looks the same); this run started it empty, so the
	// force is true.
	initNS := b.Init
	if t.private != nil {
		initNS = b.ForceInit
	}
	if err := initNS(ctx); err != nil {
		cl.run()
		return nil, err
	}
	simba, simbaH, err := simbaCases(ctx, b, deadline.Config{}, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}

	rawKey := "bp:{" + ns + "}:raw"
	raw := func(ctx context.Context) error {
		ok, err := rdb.SetNX(ctx, rawKey, "v", ttl).Result()
		if err == nil && !ok {
			err = errors.New("raw key already set")
		}
		if err != nil {
			return err
		}
		return rdb.Del(ctx, rawKey).Err()
	}

	rl := redislock.New(rdb)
	rlKey := "bp:{" + ns + "}:redislock"
	redislockPair := func(ctx context.Context) error {
		l, err := rl.Obtain(ctx, rlKey, ttl, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	rlOpts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}
	redislockHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		a, err := rl.Obtain(ctx, rlKey+":h", ttl, nil)
		if err != nil {
			return 0, err
		}
		return handover(ctx, lead, func() error { return a.Release(ctx) }, func(ctx context.Context) (func() error, error) {
			l, err := rl.Obtain(ctx, rlKey+":h", ttl, rlOpts)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		})
	}

	rs := redsync.New(goredis.NewPool(rdb))
	rsMutex := rs.NewMutex("bp:{"+ns+"}:redsync", redsync.WithExpiry(ttl))
	redsyncPair := func(ctx context.Context) error {
		if err := rsMutex.TryLockContext(ctx); err != nil {
			return err
		}
		_, err := rsMutex.UnlockContext(ctx)
		return err
	}
	rsA := rs.NewMutex("bp:{"+ns+"}:redsync:h", redsync.WithExpiry(ttl))
	rsB := rs.NewMutex("bp:{"+ns+"}:redsync:h", redsync.WithExpiry(ttl))
	redsyncHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if err := rsA.LockContext(ctx); err != nil {
			return 0, err
		}
		return handover(ctx, lead, func() error { _, err := rsA.UnlockContext(ctx); return err }, func(ctx context.Context) (func() error, error) {
			if err := rsB.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error { _, err := rsB.UnlockContext(ctx); return err }, nil
		})
	}

	return &backend{
		title: "Redis",
		raw:   "`SET NX PX` + `DEL`",
		pairs: append(append([]pairCase{{"raw", raw}}, simba...),
			pairCase{"bsm/redislock Obtain + Release", redislockPair},
			pairCase{"redsync TryLock + Unlock", redsyncPair},
		),
		handovers: []handoverCase{
			simbaH,
			{name: "redsync Lock (default retry: 32 tries, 50–250 ms apart)", run: redsyncHandover},
			{name: "bsm/redislock Obtain (LinearBackoff 100 ms, its README's)", run: redislockHandover},
		},
		probe: probeIf(t, func() *serverProbe { return redisProbe(rdb, addr) }),
		notes: []string{"go-redis v9 client, one per process, shared by every case; every library's TTL is 15 s (Simba's default lease)."},
		close: cl.run,
	}, nil
}
