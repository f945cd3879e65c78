package main

import (
	"context"
	"errors"
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

func zkSetup(ctx context.Context, ns string, t targets) (*backend, error) {
	env, err := need("SIMBA_ZK_SERVERS", t.zk)
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
	// ForceInit: Init refuses on servers younger than MaxLease (ADR 0179).
	if err := b.ForceInit(ctx); err != nil {
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
	// The floor of Simba's design, bare: B's create is refused, B arms an
	// exists watch, and when it fires B sends the multi Simba's acquire
	// sends (check the root, create the ephemeral node, set its data for
	// its stat), on its own connection.
	rawHPath := root + "/rawh"
	data := []byte(`{"session":"0x0000000000000000","owner":{"identity":"benchpeers"},"timeout_ms":15000}`)
	createB := func() error {
		res, err := connB.Multi(&zk.CheckVersionRequest{Path: root, Version: -1},
			&zk.CreateRequest{Path: rawHPath, Data: data, Acl: acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: rawHPath, Data: data, Version: 0})
		if err == nil {
			for _, r := range res {
				if r.Error != nil {
					return r.Error
				}
			}
		}
		return err
	}
	rawHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if _, err := conn.Create(rawHPath, data, zk.FlagEphemeral, acl); err != nil {
			return 0, err
		}
		return handover(ctx, lead, func() error { return conn.Delete(rawHPath, -1) }, func(ctx context.Context) (func() error, error) {
			for {
				err := createB()
				if err == nil {
					return func() error { return connB.Delete(rawHPath, -1) }, nil
				}
				if !errors.Is(err, zk.ErrNodeExists) {
					return nil, err
				}
				ok, _, ev, err := connB.ExistsW(rawHPath)
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
				select {
				case <-ev:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		})
	}
	return &backend{
		title: "ZooKeeper",
		raw:   "create ephemeral node + delete",
		pairs: append(append([]pairCase{{"raw", raw}}, simba...), pairCase{"go-zookeeper zk.Lock Lock + Unlock", zkLockPair}),
		handovers: []handoverCase{simbaH, {name: "go-zookeeper zk.Lock (B on its own connection)", run: zkLockHandover},
			{name: "raw floor (delete → exists watch → multi check + create + setData)", run: rawHandover}},
		notes: []string{"The raw pair and zk.Lock share one go-zookeeper connection; Simba's backend opens its own per session. The raw handover is the floor of Simba's design on bare go-zookeeper calls: A's delete, B's exists watch firing, B's multi (the write Simba's acquire makes, which the server logs to disk before answering); zk.Lock's waiter already holds its sequential node and only reads the children (no write) when its watch fires."},
		close: cl.run,
	}, nil
}
