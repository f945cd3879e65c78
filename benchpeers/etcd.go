package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	"github.com/simba-go/simba/deadline"
)

// etcdSetup measures Simba on etcd (backend-etcd) and etcd's own lock and
// election recipes against etcd's raw primitive pair.
func etcdSetup(ctx context.Context, ns string, t targets) (*backend, error) {
	env, err := need("SIMBA_ETCD_ENDPOINTS", t.etcd)
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
	sb0, err := etcdsimba.New(cli, root+"/simba", etcdsimba.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = sb0.Shutdown(context.Background()) })
	// A fresh namespace: without Init its first use waits one MaxLease.
	// A private server was started empty by this run: see redisSetup.
	initNS := sb0.Init
	if t.private != nil {
		initNS = sb0.ForceInit
	}
	if err := initNS(ctx); err != nil {
		cl.run()
		return nil, err
	}
	simba, simbaH, err := simbaCases(ctx, sb0, deadline.Config{}, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}

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

	// The raw pair with Simba's restore check beside the put: a Status of
	// the member, sent with the transaction (docs/adr/0209, 0326). No
	// request that grants can carry the raft index the check needs, so
	// this is the floor of an acquisition checked against a restore.
	maint := pb.NewMaintenanceClient(cli.ActiveConnection())
	rawStatus := func(ctx context.Context) error {
		ch := make(chan error, 1)
		go func() {
			_, err := maint.Status(ctx, &pb.StatusRequest{})
			ch <- err
		}()
		err := raw(ctx)
		return errors.Join(err, <-ch)
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
	// The raw handover: the floor of Simba's design on bare client calls.
	// B's put-if-absent fails, B waits on its standing watch of the key
	// (Simba's backend keeps one on the namespace) for a delete after that
	// attempt, then puts again: A's delete (a write), the watch event, B's
	// put (a write).
	rawHKey := root + "/rawh"
	wctx, wcancel := context.WithCancel(ctx)
	cl.add(wcancel)
	rawWatch := cliB.Watch(wctx, rawHKey, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	if _, ok := <-rawWatch; !ok {
		cl.run()
		return nil, errors.New("raw handover: the watch ended before it was created")
	}
	putIfAbsent := func(ctx context.Context, c *clientv3.Client, l clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		return c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(rawHKey), "=", 0)).
			Then(clientv3.OpPut(rawHKey, "v", clientv3.WithLease(l))).Commit()
	}
	rawHandover := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if r, err := putIfAbsent(ctx, cli, sa.Lease()); err != nil || !r.Succeeded {
			return 0, fmt.Errorf("raw handover: A's put: %v (granted %v)", err, err == nil && r.Succeeded)
		}
		return handover(ctx, lead, func() error { _, err := cli.Delete(ctx, rawHKey); return err }, func(ctx context.Context) (func() error, error) {
			for {
				r, err := putIfAbsent(ctx, cliB, sb.Lease())
				if err != nil {
					return nil, err
				}
				if r.Succeeded {
					return func() error { _, err := cliB.Delete(context.Background(), rawHKey); return err }, nil
				}
				if err := deletedAfter(ctx, rawWatch, r.Header.Revision); err != nil {
					return nil, err
				}
			}
		})
	}

	return &backend{
		title: "etcd",
		raw:   "transaction putting the key under a lease if absent + delete",
		pairs: append(append([]pairCase{{"raw", raw}, {rawStatusCase, rawStatus}}, simba...),
			pairCase{"etcd concurrency.Mutex TryLock + Unlock", mutexPair},
			pairCase{"etcd concurrency.Election Campaign + Resign", electionPair}),
		handovers: []handoverCase{
			simbaH,
			{name: "etcd concurrency.Mutex Lock (B on its own client and session)", run: mutexHandover},
			{name: "etcd concurrency.Election Campaign (B on its own client and session)", run: electionHandover},
			{name: "raw floor (delete → B's standing watch → put if absent)", run: rawHandover},
		},
		notes: []string{fmt.Sprintf("etcd %s on loopback (Debian's etcd-server, one member), go.etcd.io/etcd/client/v3 v3.5.29; one client and one concurrency.Session (TTL %v) per side, kept for the whole run; Simba (backend-etcd) shares the first client. "+
			"The raw pair with a Status beside the put is the floor of an acquisition checked against a restore from a snapshot (ADR 0209: no request that grants carries the raft index the check compares; ADR 0326). "+
			"The raw handover is the floor of Simba's design on bare client calls: A's delete, the event on B's standing watch of the key, B's put if absent (two writes, each fsynced before its reply).", etcdVersion(ctx, cli, env), ttl)},
		close: cl.run,
	}, nil
}

// deletedAfter waits for a delete event after revision rev on wch: older
// ones are of earlier rounds.
func deletedAfter(ctx context.Context, wch clientv3.WatchChan, rev int64) error {
	for {
		select {
		case resp, ok := <-wch:
			if !ok {
				return errors.New("raw handover: the watch ended")
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > rev {
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rawStatusCase is the raw pair plus the restore check's Status.
const rawStatusCase = "raw + a Status beside the put (the restore check's floor)"

// etcdVersion is the server's version, for the notes.
func etcdVersion(ctx context.Context, c *clientv3.Client, endpoints string) string {
	st, err := c.Status(ctx, strings.Split(endpoints, ",")[0])
	if err != nil {
		return "(version unknown)"
	}
	return st.Version
}
