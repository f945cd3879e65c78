package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func zkConn(servers []string) (*zk.Conn, error) {
	conn, _, err := zk.Connect(servers, ttl, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	if _, _, err := conn.Exists("/"); err != nil { // waits for the session
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func zkSetup(ctx context.Context, ns string) (*backend, error) {
	env, err := need("SIMBA_ZK_SERVERS")
	if err != nil {
		return nil, err
	}
	servers := strings.Split(env, ",")
	root := "/simba-benchpeers/" + ns
	var cl closers
	conn, err := zkConn(servers)
	if err != nil {
		return nil, err
	}
	cl.add(conn.Close)
	connB, err := zkConn(servers)
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(connB.Close)
	b, err := zksimba.New(servers, root, zksimba.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = b.Shutdown(context.Background()) })
	// A fresh namespace: without Init its first use waits one MaxLease.
	if err := b.Init(ctx); err != nil {
		cl.run()
		return nil, err
	}
	simba, simbaH, err := simbaCases(ctx, b, deadline.Config{}, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}

	acl := zk.WorldACL(zk.PermAll)
	rawPath := root + "/raw"
	raw := func(context.Context) error {
		if _, err := conn.Create(rawPath, nil, zk.FlagEphemeral, acl); err != nil {
			return err
		}
		return conn.Delete(rawPath, -1)
	}
	zl := zk.NewLock(conn, root+"/zklock", acl)
	zkLockPair := func(context.Context) error {
		if err := zl.Lock(); err != nil {
			return err
		}
		return zl.Unlock()
	}
	la, lb := zk.NewLock(conn, root+"/zklock-h", acl), zk.NewLock(connB, root+"/zklock-h", acl)
	zkLockHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if err := la.Lock(); err != nil {
			return 0, err
		}
		return handover(ctx, lead, la.Unlock, func(context.Context) (func() error, error) {
			if err := lb.Lock(); err != nil {
				return nil, err
			}
			return lb.Unlock, nil
		})
	}
	return &backend{
		title:     "ZooKeeper",
		raw:       "create ephemeral node + delete",
		pairs:     append(append([]pairCase{{"raw", raw}}, simba...), pairCase{"go-zookeeper zk.Lock Lock + Unlock", zkLockPair}),
		handovers: []handoverCase{simbaH, {name: "go-zookeeper zk.Lock (B on its own connection)", run: zkLockHandover}},
		notes:     []string{"The raw pair and zk.Lock share one go-zookeeper connection; Simba's backend opens its own per session."},
		close:     cl.run,
	}, nil
}
