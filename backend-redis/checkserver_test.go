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
		opts []redissimba.Option
	}{
		{"evicting, no persistence", []string{"--maxmemory-policy", "allkeys-lru"}, []string{
			"WARN redissimba: maxmemory-policy allkeys-lru with maxmemory 0",
			"WARN redissimba: no persistence",
		}, nil},
		{"noeviction, AOF", []string{"--maxmemory-policy", "noeviction"}, nil, nil},
		// A crash of these restarts from an older state with the epoch key
		// in it: no quarantine, while the holder of a lease granted since
		// still believes in it.
		{"noeviction, AOF everysec", []string{"--maxmemory-policy", "noeviction"}, []string{
			"WARN redissimba: appendonly yes with appendfsync everysec",
		}, nil},
		{"noeviction, RDB snapshots", []string{"--maxmemory-policy", "noeviction"}, []string{
			"WARN redissimba: persistence by RDB snapshots only",
		}, nil},
		{"a replica, min-replicas-to-write 0", []string{"--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0"}, []string{
			// The quarantine does not cover a split brain (ADR 0216).
			"WARN redissimba: 1 replica(s) and min-replicas-to-write 0: if a replica is promoted (Sentinel) while this master still serves clients on its side of a partition with 0 replica(s), their holders renew here while the promoted replica grants their leases after its quarantine: two holders",
		}, nil},
		{"a replica, min-replicas-to-write 1", []string{"--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0", "--min-replicas-to-write", "1"}, nil, nil},
		{"a replica, WithWaitReplicas(1)", []string{"--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0"}, nil,
			[]redissimba.Option{redissimba.WithWaitReplicas(1, time.Second)}},
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
			b, err := redissimba.New(c, "check", append([]redissimba.Option{redissimba.WithLogger(slog.New(&log))}, tc.opts...)...)
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

func slogOf(l *logged) *slog.Logger { return slog.New(l) }

// has reports whether a logged message starts with prefix.
func (l *logged) has(prefix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// The server check's warnings reach the application once per start
// (issue 22.9): through WithLogger's logger at the first Open or Init, or
// not at all when the application called CheckServer itself and got them.
func TestServerCheckLoggedOnce(t *testing.T) {
	srv := startServer(t) // no persistence: one warning
	c := dial(t, redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true}), "private server")
	var log logged
	b, err := redissimba.New(c, namespace(t), redissimba.WithLogger(slog.New(&log)))
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Init(ctxT(t)) // refused on a server just started; the check ran
	for range 2 {
		if _, err := b.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if len(log.msgs) != 1 || !strings.HasPrefix(log.msgs[0], "WARN redissimba: no persistence") {
		t.Fatalf("logged %q, want the no-persistence warning once", log.msgs)
	}

	var log2 logged
	b2, err := redissimba.New(c, namespace(t), redissimba.WithLogger(slog.New(&log2)))
	if err != nil {
		t.Fatal(err)
	}
	if w, err := b2.CheckServer(ctxT(t)); err != nil || len(w) != 1 {
		t.Fatalf("CheckServer = %q, %v", w, err)
	}
	_ = b2.Init(ctxT(t))
	if _, err := b2.Open(ctxT(t), driver.OpenRequest{LeaseDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	if len(log2.msgs) != 0 {
		t.Fatalf("logged %q after the application's own CheckServer, want nothing", log2.msgs)
	}
}
