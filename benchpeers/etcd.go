package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdSetup measures etcd's own lock and election recipes against etcd's
// raw primitive pair. Simba has no etcd backend: this section shows what a
// peer library's engine costs over its raw pair, the figure Simba's ratio
// is read against.
func etcdSetup(ctx context.Context, ns string) (*backend, error) {
	env, err := need("SIMBA_ETCD_ENDPOINTS")
	if err != nil {
		return nil, err
	}
	var cl closers
	client := func() (*clientv3.Client, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(env, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		cl.add(func() { _ = c.Close() })
		return c, nil
	}
	cli, err := client()
	if err != nil {
		return nil, err
	}
	cliB, err := client()
	if err != nil {
		cl.run()
		return nil, err
	}
	session := func(c *clientv3.Client) (*concurrency.Session, error) {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		cl.add(func() { _ = s.Close() })
		return s, nil
	}
	sa, err := session(cli)
	if err != nil {
		cl.run()
		return nil, err
	}
	sb, err := session(cliB)
	if err != nil {
		cl.run()
		return nil, err
	}
	root := "/simba-benchpeers/" + ns

	// The raw pair: what both recipes do at their core, a put under the
	// session's lease if the key does not exist, and a delete.
	rawKey := root + "/raw"
	raw := func(ctx context.Context) error {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(rawKey), "=", 0)).
			Then(clientv3.OpPut(rawKey, "v", clientv3.WithLease(sa.Lease()))).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return errors.New("raw key already exists")
		}
		_, err = cli.Delete(ctx, rawKey)
		return err
	}

	mu := concurrency.NewMutex(sa, root+"/mutex")
	mutexPair := func(ctx context.Context) error {
		if err := mu.TryLock(ctx); err != nil {
			return err
		}
		return mu.Unlock(ctx)
	}
	el := concurrency.NewElection(sa, root+"/election")
	electionPair := func(ctx context.Context) error {
		if err := el.Campaign(ctx, "a"); err != nil {
			return err
		}
		return el.Resign(ctx)
	}

	ma, mb := concurrency.NewMutex(sa, root+"/mutex-h"), concurrency.NewMutex(sb, root+"/mutex-h")
	mutexHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if err := ma.Lock(ctx); err != nil {
			return 0, err
		}
		return handover(ctx, lead, func() error { return ma.Unlock(ctx) }, func(ctx context.Context) (func() error, error) {
			if err := mb.Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return mb.Unlock(context.Background()) }, nil
		})
	}
	ea, eb := concurrency.NewElection(sa, root+"/election-h"), concurrency.NewElection(sb, root+"/election-h")
	electionHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if err := ea.Campaign(ctx, "a"); err != nil {
			return 0, err
		}
		return handover(ctx, lead, func() error { return ea.Resign(ctx) }, func(ctx context.Context) (func() error, error) {
			if err := eb.Campaign(ctx, "b"); err != nil {
				return nil, err
			}
			return func() error { return eb.Resign(context.Background()) }, nil
		})
	}
	return &backend{
		title: "etcd (no Simba backend: the peers against their raw pair)",
		raw:   "transaction putting the key under a lease if absent + delete",
		pairs: []pairCase{
			{"raw", raw},
			{"etcd concurrency.Mutex TryLock + Unlock", mutexPair},
			{"etcd concurrency.Election Campaign + Resign", electionPair},
		},
		handovers: []handoverCase{
			{name: "etcd concurrency.Mutex Lock (B on its own client and session)", run: mutexHandover},
			{name: "etcd concurrency.Election Campaign (B on its own client and session)", run: electionHandover},
		},
		notes: []string{fmt.Sprintf("etcd %s on loopback (Debian's etcd-server, one member), go.etcd.io/etcd/client/v3 v3.5.29; one client and one concurrency.Session (TTL %v) per side, kept for the whole run.", etcdVersion(ctx, cli, env), ttl)},
		close: cl.run,
	}, nil
}

// etcdVersion is the server's version, for the notes.
func etcdVersion(ctx context.Context, c *clientv3.Client, endpoints string) string {
	st, err := c.Status(ctx, strings.Split(endpoints, ",")[0])
	if err != nil {
		return "(version unknown)"
	}
	return st.Version
}
