package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw  string
		want target
	}{
		{"redis://127.0.0.1:6379", target{scheme: "redis", addrs: []string{"127.0.0.1:6379"}, namespace: "simba"}},
		{"rediss://u:p@h:6380/2?namespace=billing", target{scheme: "rediss", addrs: []string{"h:6380"}, tls: true, user: "u", password: "p", db: 2, namespace: "billing"}},
		{"redis://h:1?namespace=x&max_lease=5m", target{scheme: "redis", addrs: []string{"h:1"}, namespace: "x", maxLease: 5 * time.Minute}},
		{"redis://h:1?namespace=x&max_lock_delay=15s", target{scheme: "redis", addrs: []string{"h:1"}, namespace: "x", maxDelay: 15 * time.Second}},
		{"redis+cluster://a:7001,b:7002?namespace=x", target{scheme: "redis+cluster", addrs: []string{"a:7001", "b:7002"}, namespace: "x"}},
		{"postgres://postgres@h:5432/test?sslmode=disable&namespace=app", target{scheme: "postgres", user: "postgres", dsn: "postgres://postgres@h:5432/test?sslmode=disable", namespace: "app"}},
		{"mysql://root:pw@h:3306/test?namespace=app", target{scheme: "mysql", user: "root", password: "pw", dsn: "root:pw@tcp(h:3306)/test", namespace: "app"}},
		{"zk://a:2181,b:2181/simba/app", target{scheme: "zk", addrs: []string{"a:2181", "b:2181"}, namespace: "/simba/app"}},
		{"etcd://a:2379,b:2379/?namespace=/simba/app", target{scheme: "etcd", addrs: []string{"a:2379", "b:2379"}, namespace: "/simba/app"}},
		{"etcds://u:p@h:2379?namespace=/x", target{scheme: "etcds", addrs: []string{"h:2379"}, tls: true, user: "u", password: "p", namespace: "/x"}},
		// max_lock_delay on every backend, never passed on to a SQL driver.
		{"postgres://postgres@h:5432/test?sslmode=disable&namespace=app&max_lock_delay=15s", target{scheme: "postgres", user: "postgres", dsn: "postgres://postgres@h:5432/test?sslmode=disable", namespace: "app", maxDelay: 15 * time.Second}},
		{"mysql://root:pw@h:3306/test?namespace=app&max_lock_delay=1m", target{scheme: "mysql", user: "root", password: "pw", dsn: "root:pw@tcp(h:3306)/test", namespace: "app", maxDelay: time.Minute}},
		{"zk://a:2181/simba/app?max_lock_delay=2s", target{scheme: "zk", addrs: []string{"a:2181"}, namespace: "/simba/app", maxDelay: 2 * time.Second}},
		{"etcd://a:2379/?namespace=/simba/app&max_lock_delay=0s", target{scheme: "etcd", addrs: []string{"a:2379"}, namespace: "/simba/app"}},
		{"etcd://a:2379/?namespace=/simba/app&max_lock_delay=1h", target{scheme: "etcd", addrs: []string{"a:2379"}, namespace: "/simba/app", maxDelay: time.Hour}},
	}
	for _, g := range good {
		got, err := parseURL(g.raw)
		if err != nil {
			t.Errorf("parseURL(%q): %v", g.raw, err)
			continue
		}
		if strings.Join(got.addrs, ",") != strings.Join(g.want.addrs, ",") || got.scheme != g.want.scheme || got.tls != g.want.tls ||
			got.user != g.want.user || got.password != g.want.password || got.db != g.want.db || got.dsn != g.want.dsn || got.namespace != g.want.namespace || got.maxLease != g.want.maxLease || got.maxDelay != g.want.maxDelay {
			t.Errorf("parseURL(%q) = %+v, want %+v", g.raw, got, g.want)
		}
	}
	bad := map[string]string{
		"":                                       "empty",
		"localhost:6379":                         "no host",
		"http://h:80":                            `unknown scheme "http"`,
		"redis://h":                              "needs host:port",
		"redis://h:99999":                        "bad port",
		"redis://a:1,b:2":                        "redis+cluster://",
		"redis://h:1/x":                          "not a number",
		"redis://h:1?db=2":                       `unknown parameter "db"`,
		"redis+cluster://h:1/2":                  "no database",
		"redis://h:1?max_lease=5":                "not a positive duration",
		"redis://h:1?max_lease=-1s":              "not a positive duration",
		"redis://h:1?max_lock_delay=-1s":         "not a duration ≥ 0",
		"postgres://h:5432/db?max_lock_delay=15": "not a duration ≥ 0",
		"mysql://u@h:3306/db?max_lock_delay=-1s": "not a duration ≥ 0",
		"zk://h:2181/r?max_lock_delay=x":         "not a duration ≥ 0",
		"zk://h:2181/r?max_lease=1s":             "no parameters but max_lock_delay",
		"etcd://h:2379/?namespace=/a&max_lock_delay=-2s": "not a duration ≥ 0",
		"mysql://h:3306":                     "want mysql://",
		"zk://h:2181":                        "no root path",
		"zk://h:2181/r?namespace=x":          "no parameters",
		"etcd://h:2379":                      "no namespace",
		"etcd://h:2379/app":                  "not as the path",
		"etcd://h:2379/?namespace=app":       "does not start with /",
		"etcd://h:2379/?namespace=/a&x=1":    `unknown parameter "x"`,
		"postgres://u:secret@h:1,g:2/db":     "one host",
		"postgres://u:secret@h/db?namespace": "needs host:port",
	}
	for raw, want := range bad {
		_, err := parseURL(raw)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("parseURL(%q) = %v, want ErrBadURL saying %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("parseURL(%q): the error shows the password: %v", raw, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://127.0.0.1:6379", "rediss://u:p@h:1/2?namespace=x", "redis+cluster://a:1,b:2",
		"postgres://u@h:5432/db?sslmode=disable&namespace=y", "mysql://r@h:3306/t", "zk://a:1,b:2/r", "zk://[::1]:2181/x", "%", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := parseURL(raw)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("parseURL(%q) error %v does not wrap ErrBadURL", raw, err)
			}
			return
		}
		switch got.scheme {
		case "redis", "rediss", "redis+cluster", "rediss+cluster", "zk":
			if len(got.addrs) == 0 || got.namespace == "" {
				t.Fatalf("parseURL(%q) = %+v: no address or namespace", raw, got)
			}
		case "postgres", "postgresql", "mysql":
			if got.dsn == "" {
				t.Fatalf("parseURL(%q) = %+v: no DSN", raw, got)
			}
		default:
			t.Fatalf("parseURL(%q) accepted scheme %q", raw, got.scheme)
		}
	})
}

// TestHelpListsExitCodesAndURLs: --help, of simba and of each command,
// names every exit code of ADR 0092 and the ?namespace= parameter (issue
// 22), without a backend.
func TestHelpListsExitCodesAndURLs(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"exec", "--help"}, {"leases", "--help"}} {
		cmd := exec.Command(binary(t), args...)
		cmd.Env = append(os.Environ(), "SIMBA_BACKEND=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("simba %v: %v", args, err)
		}
		for _, want := range []string{"?namespace=NS", "zk://h1:2181,h2:2181/ROOT", "\n  64 ", "\n  69 ", "\n  75 ", "\n  76 ", "\n  126 ", "\n  130 ", "\n  1 ", "128+N", "SIMBA_FENCING_TOKEN"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("simba %v does not show %q:\n%s", args, want, out)
			}
		}
	}
}

// Every backend's URL takes max_lock_delay (ADR 0296): the commands run
// with it (a SQL driver never sees it: PostgreSQL would refuse it as an
// unknown setting), and it reaches the backend, whose own bound refuses
// a value above it (ZooKeeper, etcd: at most a day).
func TestMaxLockDelayOnEveryBackend(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		withDelay := url + sep(url) + "max_lock_delay=15s"
		if r := simba(t, withDelay, "leases"); r.code != 0 {
			t.Fatalf("leases with max_lock_delay=15s: exit %d: %s", r.code, r.stderr)
		}
		if !strings.HasPrefix(url, "zk://") && !strings.HasPrefix(url, "etcd://") {
			return
		}
		r := simba(t, url+sep(url)+"max_lock_delay=25h", "leases")
		if r.code == 0 || !strings.Contains(r.stderr, "WithMaxLockDelay(25h0m0s)") {
			t.Fatalf("leases with max_lock_delay=25h: exit %d, stderr %q; want the backend's refusal of WithMaxLockDelay(25h0m0s)", r.code, r.stderr)
		}
	})
}
