package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// TestLookingCreatesNothing is issue 22.3: leases, leader and watch on a
// mistyped SQL namespace exit non-zero naming it, and create no table or
// routine; leases and leader on Redis and ZooKeeper write nothing either
// (no key, no node).
func TestLookingCreatesNothing(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			v := os.Getenv(s.env)
			if v == "" {
				t.Fatalf("%s is not set: run `make services` and `. .services/env` (the CLI is tested on a real %s)", s.env, s.name)
			}
			ns := fmt.Sprintf("typo%d", time.Now().UnixNano()%1_000_000_000)
			url := s.url(v, ns)
			sqlURL := s.name == "postgres" || s.name == "mysql"
			cmds := [][]string{{"leases"}, {"leader", "x"}}
			if sqlURL {
				cmds = append(cmds, []string{"watch", "x"})
			} else {
				w := start(t, url, "watch", "--poll", "50ms", "x")
				if l := w.line(t); !strings.HasSuffix(l, " none") {
					t.Errorf("watch on a new namespace printed %q, want none", l)
				}
				_ = w.cmd.Process.Signal(os.Interrupt)
				w.exit(t)
			}
			for _, args := range cmds {
				r := simba(t, url, args...)
				switch {
				case sqlURL && (r.code != exitUsage || !strings.Contains(r.stderr, ns)):
					t.Errorf("simba %v on the unknown namespace %s: exit %d, stderr %q; want %d naming it", args, ns, r.code, r.stderr, exitUsage)
				case !sqlURL && args[0] == "leases" && r.code != 0:
					t.Errorf("simba leases: exit %d, stderr %q", r.code, r.stderr)
				}
			}
			if got := written(t, s.name, v, ns); got != "" {
				t.Errorf("after leases, leader and watch on %s: %s", ns, got)
			}
		})
	}
}

// written describes what exists of namespace ns on the server, "" if
// nothing.
func written(t *testing.T, server, v, ns string) string {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var n int
	var err error
	switch server {
	case "postgres":
		var pool *pgxpool.Pool
		if pool, err = pgxpool.New(ctx, v); err == nil {
			defer pool.Close()
			err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE $1 || '\_%')
			    + (SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '\_%')`, ns).Scan(&n)
		}
	case "mysql":
		var cfg *mysql.Config
		if cfg, err = mysql.ParseDSN(v); err == nil {
			var db *sql.DB
			if db, err = sql.Open("mysql", cfg.FormatDSN()); err == nil {
				defer db.Close()
				err = db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '\_%'))
				    + (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE() AND routine_name LIKE CONCAT(?, '\_%'))`, ns, ns).Scan(&n)
			}
		}
	case "redis", "redis-cluster":
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(v, ","), IsClusterMode: server == "redis-cluster"})
		defer rdb.Close()
		var keys []string
		if c, ok := rdb.(*redis.ClusterClient); ok {
			var mu sync.Mutex // ForEachMaster calls fn concurrently
			err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				k, err := m.Keys(ctx, "*"+ns+"*").Result()
				mu.Lock()
				defer mu.Unlock()
				keys = append(keys, k...)
				return err
			})
		} else {
			keys, err = rdb.Keys(ctx, "*"+ns+"*").Result()
		}
		n = len(keys)
	case "zookeeper":
		var c *zk.Conn
		if c, _, err = zk.Connect(strings.Split(v, ","), 5*time.Second, zk.WithLogInfo(false)); err == nil {
			defer c.Close()
			var ok bool
			if ok, _, err = c.Exists("/simba-cli/" + ns); ok {
				n = 1
			}
		}
	}
	if err != nil {
		t.Fatalf("look at %s: %v", server, err)
	}
	if n > 0 {
		return fmt.Sprintf("%d objects of it on %s", n, server)
	}
	return ""
}

// TestWatch: watch prints none, then the holder of a lock taken by
// another process, then none again after it is released, on every
// backend, without opening a session of its own.
func TestWatch(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		w := start(t, url, "watch", "--poll", "50ms", "w")
		if l := w.line(t); !strings.HasSuffix(l, " none") {
			t.Fatalf("watch's first line %q, want none", l)
		}
		if r := simba(t, url, "exec", "--lock", "w", "--", "sleep", "1"); r.code != 0 {
			t.Fatalf("exec --lock: exit %d: %s", r.code, r.stderr)
		}
		if l := w.line(t); !strings.Contains(l, " token=") {
			t.Errorf("watch's line after the lock was taken: %q, want the holder", l)
		}
		if l := w.line(t); !strings.HasSuffix(l, " none") {
			t.Errorf("watch's line after the release: %q, want none", l)
		}
		_ = w.cmd.Process.Signal(os.Interrupt)
		w.exit(t)
	})
}
