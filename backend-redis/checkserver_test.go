package redissimba_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// logged is a slog handler that keeps messages.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// The first Open warns, once, about an evicting policy, a server without
// persistence, and one whose restart can bring back an older state (RDB
// snapshots alone, an AOF not fsynced on every write), on a private server
// configured so; a server that fsyncs every write and never evicts gets no
// warning.
func TestServerCheckWarns(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"evicting, no persistence", []string{"--maxmemory-policy", "allkeys-lru"}, []string{
			"WARN redissimba: maxmemory-policy is allkeys-lru",
			"WARN redissimba: no persistence",
		}},
		{"noeviction, AOF", []string{"--maxmemory-policy", "noeviction"}, nil},
		// A crash of these restarts from an older state with the epoch key
		// in it: no quarantine, while the holder of a lease granted since
		// still believes in it.
		{"noeviction, AOF everysec", []string{"--maxmemory-policy", "noeviction"}, []string{
			"WARN redissimba: appendonly yes with appendfsync everysec",
		}},
		{"noeviction, RDB snapshots", []string{"--maxmemory-policy", "noeviction"}, []string{
			"WARN redissimba: persistence by RDB snapshots only",
		}},
		{"a replica, min-replicas-to-write 0", []string{"--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0"}, []string{
			"WARN redissimba: 1 replica(s) and min-replicas-to-write 0",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, tc.args...)
			c := dial(t, redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true}), "private server")
			if strings.Contains(tc.name, "replica") {
				startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(srv.port))
				if n, err := c.Do(ctxT(t), "WAIT", 1, 5000).Int(); err != nil || n != 1 {
					t.Fatalf("WAIT 1: %d, %v", n, err)
				}
			}
			// startServer turns persistence off: turn it on as the case says.
			switch {
			case strings.Contains(tc.name, "RDB"):
				if err := c.ConfigSet(ctxT(t), "save", "3600 1").Err(); err != nil {
					t.Fatal(err)
				}
			case strings.Contains(tc.name, "AOF") || strings.Contains(tc.name, "replica"):
				if err := c.ConfigSet(ctxT(t), "appendonly", "yes").Err(); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(tc.name, "everysec") {
					if err := c.ConfigSet(ctxT(t), "appendfsync", "always").Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			var log logged
			b, err := redissimba.New(c, "check", redissimba.WithLogger(slog.New(&log)))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			if len(log.msgs) != len(tc.want) {
				t.Fatalf("logged %q, want %d warnings: %q", log.msgs, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(log.msgs[i], w) {
					t.Errorf("warning %d = %q, want it to start with %q", i, log.msgs[i], w)
				}
			}
		})
	}
}
