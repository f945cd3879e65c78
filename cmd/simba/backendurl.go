package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdsimba "github.com/simba-go/simba/backend-etcd"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	zksimba "github.com/simba-go/simba/backend-zk"
	"github.com/simba-go/simba/session"
)

// ErrBadURL is wrapped by every error about a backend URL.
var ErrBadURL = errors.New("simba: bad backend URL")

// target is a parsed backend URL: what to connect to, not yet connected.
type target struct {
	scheme    string
	addrs     []string // host:port, for redis, redis+cluster, zk
	tls       bool
	user      string
	password  string
	db        int           // redis database
	dsn       string        // postgres URL or MySQL DSN without our parameters
	namespace string        // redis namespace, SQL table prefix, ZooKeeper root; "" for the backend's default
	maxLease  time.Duration // redis: the applications' WithMaxLease (0: the default)
	maxDelay  time.Duration // the applications' WithMaxLockDelay, every backend (0: the default)
}

// schemes lists the URL schemes, for errors and help.
const schemes = "redis://, rediss://, redis+cluster://, rediss+cluster://, postgres://, postgresql://, mysql://, zk://, etcd://, etcds://"

// parseURL parses a backend URL. The namespace is the query parameter
// "namespace" (ZooKeeper: the path); it must match the applications'.
func parseURL(raw string) (target, error) {
	bad := func(format string, args ...any) (target, error) {
		return target{}, fmt.Errorf("%w %q: %s", ErrBadURL, redact(raw), fmt.Sprintf(format, args...))
	}
	if raw == "" {
		return bad("empty (set --backend or SIMBA_BACKEND, e.g. redis://localhost:6379)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", errors.Unwrap(err))
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host (want scheme://host:port/...; schemes: %s)", schemes)
	}
	q := u.Query()
	t := target{scheme: u.Scheme, namespace: q.Get("namespace")}
	q.Del("namespace")
	if u.User != nil {
		t.user = u.User.Username()
		t.password, _ = u.User.Password()
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return bad("host %q needs host:port", h)
		} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return bad("bad port in %q", h)
		}
	}
	// The applications' maximum lock-delay, on every backend: Init's
	// young-server check (Redis, ZooKeeper) and every quarantine are sized
	// by the maximum lease plus it, so without it Init creates the epoch,
	// or a quarantine this process starts ends, while a delay asked for
	// before a loss still runs; and a lock-delay above it is refused
	// (ADRs 0246, 0281, 0296). Taken out of the query before the SQL
	// drivers see it.
	if v := q.Get("max_lock_delay"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return bad("max_lock_delay %q is not a duration ≥ 0 (the applications' WithMaxLockDelay, e.g. 15s)", v)
		}
		t.maxDelay = d
	}
	q.Del("max_lock_delay")
	switch u.Scheme {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		t.tls = strings.HasPrefix(u.Scheme, "rediss")
		t.addrs = hosts
		// The applications' maximum lease: Init's young-server check and
		// every quarantine this process starts are sized by it, so a
		// smaller one (the default) lets Init create the epoch while a
		// holder from before a restart still believes (ADR 0217).
		if v := q.Get("max_lease"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("max_lease %q is not a positive duration (the applications' WithMaxLease, e.g. 5m)", v)
			}
			t.maxLease = d
		}
		q.Del("max_lease")
		if len(q) > 0 {
			return bad("unknown parameter %q (only namespace, max_lease, max_lock_delay)", firstKey(q))
		}
		path := strings.Trim(u.Path, "/")
		if strings.HasSuffix(u.Scheme, "+cluster") {
			if path != "" {
				return bad("a Redis Cluster has no database number")
			}
		} else {
			if len(hosts) != 1 {
				return bad("one host for redis:// (use redis+cluster:// for a cluster)")
			}
			if path != "" {
				db, err := strconv.Atoi(path)
				if err != nil || db < 0 {
					return bad("database %q is not a number", path)
				}
				t.db = db
			}
		}
		if t.namespace == "" {
			t.namespace = "simba"
		}
	case "postgres", "postgresql":
		if len(hosts) != 1 {
			return bad("one host for postgres://")
		}
		c := *u
		c.RawQuery = q.Encode()
		t.dsn = c.String()
	case "mysql":
		if len(hosts) != 1 {
			return bad("one host for mysql://")
		}
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = t.user, t.password, "tcp", u.Host
		cfg.DBName = strings.Trim(u.Path, "/")
		if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
			return bad("want mysql://user:password@host:port/database")
		}
		for k, vs := range q {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = vs[len(vs)-1]
		}
		t.dsn = cfg.FormatDSN()
	case "zk":
		if len(q) > 0 || t.namespace != "" {
			return bad("ZooKeeper takes its root as the path (zk://host:2181/simba), no parameters but max_lock_delay")
		}
		if t.user != "" {
			return bad("ZooKeeper credentials are not supported in the URL")
		}
		t.addrs = hosts
		t.namespace = u.Path
		if t.namespace == "" || t.namespace == "/" {
			return bad("no root path (want zk://host:2181/root)")
		}
	case "etcd", "etcds":
		if msg := parseEtcd(&t, u, q, hosts); msg != "" {
			return bad("%s", msg)
		}
	default:
		return bad("unknown scheme %q (want one of %s)", u.Scheme, schemes)
	}
	return t, nil
}

// parseEtcd fills t for etcd://h1:2379,h2:2379/?namespace=/simba/app
// (etcds:// for TLS with the system's roots; user:password@ for etcd's
// auth), or says what is wrong.
func parseEtcd(t *target, u *url.URL, q url.Values, hosts []string) string {
	if len(q) > 0 {
		return fmt.Sprintf("unknown parameter %q (only namespace, max_lock_delay)", firstKey(q))
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return "etcd takes its namespace as ?namespace=/simba/app, not as the path"
	}
	if t.namespace == "" {
		return "no namespace (want etcd://host:2379/?namespace=/simba/app)"
	}
	if err := etcdsimba.ValidateNamespace(t.namespace); err != nil {
		return err.Error()
	}
	t.addrs, t.tls = hosts, u.Scheme == "etcds"
	return ""
}

func firstKey(q url.Values) string {
	for k := range q {
		return k
	}
	return ""
}

// redact hides a password in a URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// connect opens the backend; shutdown releases its connections. With
// existing, for the commands that only look (leases, leader, watch), a SQL
// namespace is opened as it is, never created or migrated: an unknown one
// is an error naming it (sqlbackend.ErrUnknownNamespace, issue 22.3).
func (t target) connect(ctx context.Context, existing bool) (b session.Backend, shutdown func(), err error) {
	switch t.scheme {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		var tc *tls.Config
		if t.tls {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		var rdb redis.UniversalClient
		if strings.HasSuffix(t.scheme, "+cluster") {
			rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.addrs, Username: t.user, Password: t.password, TLSConfig: tc, ContextTimeoutEnabled: true})
		} else {
			rdb = redis.NewClient(&redis.Options{Addr: t.addrs[0], Username: t.user, Password: t.password, DB: t.db, TLSConfig: tc, ContextTimeoutEnabled: true})
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			_ = rdb.Close()
			return nil, nil, fmt.Errorf("connect to Redis %v: %w", t.addrs, err)
		}
		var ropts []redissimba.Option
		if t.maxLease > 0 {
			ropts = append(ropts, redissimba.WithMaxLease(t.maxLease))
		}
		if t.maxDelay > 0 {
			ropts = append(ropts, redissimba.WithMaxLockDelay(t.maxDelay))
		}
		rb, err := redissimba.New(rdb, t.namespace, ropts...)
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		return rb, func() { _ = rdb.Close() }, nil
	case "postgres", "postgresql":
		pool, err := pgxpool.New(ctx, t.dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		var opts []pgsimba.Option
		if t.namespace != "" {
			opts = append(opts, pgsimba.WithNamespace(t.namespace))
		}
		if t.maxDelay > 0 {
			opts = append(opts, pgsimba.WithMaxLockDelay(t.maxDelay))
		}
		if existing {
			opts = append(opts, pgsimba.OpenExisting())
		}
		pb, err := pgsimba.New(ctx, pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("PostgreSQL backend: %w", err)
		}
		return pb, func() { _ = pb.Shutdown(context.Background()); pool.Close() }, nil
	case "mysql":
		db, err := sql.Open("mysql", t.dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to MySQL: %w", err)
		}
		var opts []mysqlsimba.Option
		if t.namespace != "" {
			opts = append(opts, mysqlsimba.WithNamespace(t.namespace))
		}
		if t.maxDelay > 0 {
			opts = append(opts, mysqlsimba.WithMaxLockDelay(t.maxDelay))
		}
		if existing {
			opts = append(opts, mysqlsimba.OpenExisting())
		}
		mb, err := mysqlsimba.New(ctx, db, opts...)
		if err != nil {
			_ = db.Close()
			return nil, nil, fmt.Errorf("MySQL backend: %w", err)
		}
		return mb, func() { _ = mb.Shutdown(context.Background()); _ = db.Close() }, nil
	case "etcd", "etcds":
		return connectEtcd(t)
	case "zk":
		var opts []zksimba.Option
		if t.maxDelay > 0 {
			opts = append(opts, zksimba.WithMaxLockDelay(t.maxDelay))
		}
		zb, err := zksimba.New(t.addrs, t.namespace, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("ZooKeeper backend: %w", err)
		}
		return zb, func() { _ = zb.Shutdown(context.Background()) }, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown scheme %q", ErrBadURL, t.scheme)
}

// connectEtcd makes an etcd client for t and the backend over it; the
// client is closed with the backend.
func connectEtcd(t target) (session.Backend, func(), error) {
	cfg := clientv3.Config{Endpoints: t.addrs, Username: t.user, Password: t.password,
		DialTimeout: 5 * time.Second, DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
		Logger: zap.NewNop()}
	if t.tls {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to etcd %v: %w", t.addrs, err)
	}
	var opts []etcdsimba.Option
	if t.maxDelay > 0 {
		opts = append(opts, etcdsimba.WithMaxLockDelay(t.maxDelay))
	}
	eb, err := etcdsimba.New(cli, t.namespace, opts...)
	if err != nil {
		_ = cli.Close()
		return nil, nil, fmt.Errorf("etcd backend: %w", err)
	}
	return eb, func() { _ = eb.Shutdown(context.Background()); _ = cli.Close() }, nil
}
