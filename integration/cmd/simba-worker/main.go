// Command simba-worker is one process of the real-process fault tests
// (integration/faults_test.go): it contends for one election on a real
// backend and logs, as JSON lines on CLOCK_MONOTONIC (faultcheck.Event),
// its elections, revocations and every act it makes as leader. The
// controller pauses, kills and restarts it, and faultcheck checks the logs.
//
// -group N makes it a member of the group "chaos" of N partitions instead:
// it logs the same events per partition (Event.Lease names the partition's
// lease), and faultcheck checks each partition as an election.
//
// -misbehave makes it break the rules on purpose, to show the checker
// catches it: "late" keeps acting for two leases after its term was
// revoked, "overclaim" logs ten times the validity its term has.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/integration/faultcheck"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/term"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simba-worker:", err)
		os.Exit(1)
	}
}

// logger writes events, one write per line, so a killed process leaves at
// most one torn line.
type logger struct {
	mu  sync.Mutex
	f   *os.File
	who string
	run int
}

func (l *logger) log(e faultcheck.Event) {
	e.Worker, e.Run = l.who, l.run
	b, _ := json.Marshal(e)
	l.mu.Lock()
	_, _ = l.f.Write(append(b, '\n'))
	l.mu.Unlock()
}

func run() error {
	var (
		kind      = flag.String("backend", "", "redis, redis-cluster, redis-sentinel, postgres, mysql, zookeeper, etcd")
		addr      = flag.String("addr", "", "server address(es), comma-separated; a URL or DSN for SQL; the Sentinels' for redis-sentinel (master \"m\")")
		ns        = flag.String("ns", "chaos", "namespace")
		who       = flag.String("id", "", "worker id")
		runN      = flag.Int("run", 0, "process run (restart count)")
		out       = flag.String("log", "", "event log file")
		lease     = flag.Duration("lease", 2*time.Second, "lease")
		renew     = flag.Duration("renew", 600*time.Millisecond, "renew interval")
		every     = flag.Duration("every", 50*time.Millisecond, "act interval")
		misbehave = flag.String("misbehave", "", `"late" or "overclaim": break the rules on purpose`)
		parts     = flag.Int("group", 0, "join the group \"chaos\" of this many partitions instead of contending for the election")
	)
	flag.Parse()
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	lg := &logger{f: f, who: *who, run: *runN}
	lg.log(faultcheck.Event{Kind: faultcheck.Start, T: faultcheck.Now()})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, closeB, err := open(ctx, *kind, *addr, *ns, *lease, logger)
	if err != nil {
		return err
	}
	defer closeB()
	s, err := session.Open(ctx, b,
		session.WithConfig(deadline.Config{LeaseDuration: *lease, RenewInterval: *renew}),
		session.WithIdentity(*who, nil),
		session.WithLogger(logger))
	if err != nil {
		return err
	}
	act := func(tm *term.Term, lease string) {
		t0 := faultcheck.Now() // read before checking the term
		rem := tm.Remaining()
		if *misbehave == "overclaim" {
			rem *= 10
		}
		if rem <= 0 {
			return
		}
		lg.log(faultcheck.Event{Kind: faultcheck.Act, T: t0, Token: tm.Token(), Until: t0 + int64(rem), Lease: lease})
	}
	loop := func(ctx context.Context, tm *term.Term, lease string) error {
		tick := time.NewTicker(*every)
		defer tick.Stop()
		for {
			act(tm, lease)
			select {
			case <-ctx.Done():
				lg.log(faultcheck.Event{Kind: faultcheck.Returned, T: faultcheck.Now(), Token: tm.Token(), Lease: lease})
				return nil
			case <-tick.C:
			}
		}
	}
	if *parts > 0 {
		return runGroup(ctx, s, lg, *parts, loop, func(tm *term.Term) {
			if *misbehave == "late" {
				go lateActs(lg, tm, *lease, *every, tm.Name())
			}
		})
	}
	e, err := election.Start(s, "chaos",
		election.WithListener(election.Funcs{
			Elected: func(tm *term.Term) {
				lg.log(faultcheck.Event{Kind: faultcheck.Elected, T: faultcheck.Now(), Token: tm.Token()})
			},
			Revoked: func(tm *term.Term, r term.RevokeReason) {
				lg.log(faultcheck.Event{Kind: faultcheck.Revoked, T: faultcheck.Now(), Token: tm.Token(), Reason: r.String()})
				if *misbehave == "late" {
					go lateActs(lg, tm, *lease, *every, "")
				}
			},
		}),
		election.RunWhileLeader(func(ctx context.Context, tm *term.Term) error { return loop(ctx, tm, "") }))
	if err != nil {
		_ = s.Close()
		return err
	}
	<-ctx.Done()
	_ = e.Close()
	_ = s.Close()
	lg.log(faultcheck.Event{Kind: faultcheck.Exit, T: faultcheck.Now()})
	return nil
}

// runGroup is the worker as a member of the group "chaos": it logs every
// partition's OnAssigned, OnRevoked and acts, each with the partition's
// lease name, and leaves the group on SIGTERM.
func runGroup(ctx context.Context, s *session.Session, lg *logger, n int, loop func(context.Context, *term.Term, string) error, revoked func(*term.Term)) error {
	// A partition's task starts with its term, before its OnAssigned is
	// delivered (ADR 0192); the checker reads a worker's acts against the
	// terms its callbacks logged, so each task acts only once its term's
	// OnAssigned has been logged.
	var (
		mu       sync.Mutex
		assigned = map[*term.Term]chan struct{}{}
	)
	seen := func(tm *term.Term) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		c, ok := assigned[tm]
		if !ok {
			c = make(chan struct{})
			assigned[tm] = c
		}
		return c
	}
	g, err := group.Join(s, "chaos", n,
		group.WithListener(group.Funcs{
			Assigned: func(p int, tm *term.Term) {
				lg.log(faultcheck.Event{Kind: faultcheck.Elected, T: faultcheck.Now(), Token: tm.Token(), Lease: tm.Name()})
				close(seen(tm))
			},
			Revoked: func(p int, tm *term.Term, r term.RevokeReason) {
				lg.log(faultcheck.Event{Kind: faultcheck.Revoked, T: faultcheck.Now(), Token: tm.Token(), Reason: r.String(), Lease: tm.Name()})
				mu.Lock()
				delete(assigned, tm)
				mu.Unlock()
				revoked(tm)
			},
		}),
		group.RunWhileOwner(func(ctx context.Context, _ int, tm *term.Term) error {
			select {
			case <-seen(tm):
			case <-ctx.Done():
				return nil
			}
			return loop(ctx, tm, tm.Name())
		}))
	if err != nil {
		_ = s.Close()
		return err
	}
	<-ctx.Done()
	_ = g.Close()
	_ = s.Close()
	lg.log(faultcheck.Event{Kind: faultcheck.Exit, T: faultcheck.Now()})
	return nil
}

// lateActs is the "late" misbehaviour: it ignores a revocation and acts on
// for two leases as if the term had a full lease left.
func lateActs(lg *logger, tm *term.Term, lease, every time.Duration, name string) {
	for range int(2 * lease / every) {
		t0 := faultcheck.Now()
		lg.log(faultcheck.Event{Kind: faultcheck.Act, T: t0, Token: tm.Token(), Until: t0 + int64(lease), Lease: name})
		time.Sleep(every)
	}
}

// open builds the backend client. Every worker of a run uses the same
// lease, so it is the Redis, ZooKeeper and SQL backends' MaxLease too:
// their quarantine after a data loss lasts one lease (ADR 0130). The
// controller initialises the Redis, ZooKeeper and etcd namespaces before
// the first worker starts (SQL namespaces are created by New).
func open(ctx context.Context, kind, addr, ns string, lease time.Duration, logger *slog.Logger) (session.Backend, func(), error) {
	switch kind {
	case "redis", "redis-cluster", "redis-sentinel":
		var c redis.UniversalClient
		switch kind {
		case "redis":
			c = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		case "redis-cluster":
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addr, ","), ContextTimeoutEnabled: true})
		default: // the master the Sentinels monitor as "m", followed across failovers
			c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: strings.Split(addr, ","), ContextTimeoutEnabled: true})
		}
		b, err := redissimba.New(c, ns, redissimba.WithMaxLease(lease))
		return b, func() { _ = c.Close() }, err
	case "postgres":
		pool, err := pgxpool.New(ctx, addr)
		if err != nil {
			return nil, nil, err
		}
		b, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(ns), pgsimba.WithMaxLease(lease))
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return b, func() { _ = b.Shutdown(context.Background()); pool.Close() }, nil
	case "mysql":
		db, err := sql.Open("mysql", addr)
		if err != nil {
			return nil, nil, err
		}
		b, err := mysqlsimba.New(ctx, db, mysqlsimba.WithNamespace(ns), mysqlsimba.WithMaxLease(lease))
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		return b, func() { _ = b.Shutdown(context.Background()); _ = db.Close() }, nil
	case "zookeeper":
		b, err := zksimba.New(strings.Split(addr, ","), "/chaos/"+ns, zksimba.WithMaxLease(lease))
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Shutdown(context.Background()) }, nil
	case "etcd":
		return openEtcd(strings.Split(addr, ","), ns, lease, logger)
	}
	return nil, nil, errors.New("unknown -backend " + kind)
}

// etcdPrefix is the etcd key prefix of the workers' namespace ns (the
// controller's etcdPrefix in faults_test.go: it initialises and deletes it).
func etcdPrefix(ns string) string { return "/chaos/" + ns }

// openEtcd is the etcd backend on a client of every endpoint, set as
// docs/deployment/etcd.md asks: every member (requests are hedged across
// them), gRPC keepalives (a stalled member's connection is found dead),
// a short dial timeout. WithRevokeGuard explicitly: the servers are
// Debian's etcd 3.4.23, which may commit a stalled leader's early
// revocation of a live session's lease (etcd-io/etcd#15247, ADR 0290,
// 0310); without the guard that is two holders, not a finding.
func openEtcd(eps []string, ns string, lease time.Duration, logger *slog.Logger) (session.Backend, func(), error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    10 * time.Second, // grpc-go's floor
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, nil, err
	}
	b, err := etcdsimba.New(cli, etcdPrefix(ns), etcdsimba.WithMaxLease(lease), etcdsimba.WithRevokeGuard(), etcdsimba.WithLogger(logger))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return b, func() {
		// Bounded: a worker ends within the controller's 10 s even when
		// no member answers.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
		_ = cli.Close()
	}, nil
}
