package main

import (
	"errors"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw  string
		want target
	}{
		{"redis://127.0.0.1:6379", target{scheme: "redis", addrs: []string{"127.0.0.1:6379"}, namespace: "simba"}},
		{"rediss://u:p@h:6380/2?namespace=billing", target{scheme: "rediss", addrs: []string{"h:6380"}, tls: true, user: "u", password: "p", db: 2, namespace: "billing"}},
		{"redis+cluster://a:7001,b:7002?namespace=x", target{scheme: "redis+cluster", addrs: []string{"a:7001", "b:7002"}, namespace: "x"}},
		{"postgres://postgres@h:5432/test?sslmode=disable&namespace=app", target{scheme: "postgres", user: "postgres", dsn: "postgres://postgres@h:5432/test?sslmode=disable", namespace: "app"}},
		{"mysql://root:pw@h:3306/test?namespace=app", target{scheme: "mysql", user: "root", password: "pw", dsn: "root:pw@tcp(h:3306)/test", namespace: "app"}},
		{"zk://a:2181,b:2181/simba/app", target{scheme: "zk", addrs: []string{"a:2181", "b:2181"}, namespace: "/simba/app"}},
	}
	for _, g := range good {
		got, err := parseURL(g.raw)
		if err != nil {
			t.Errorf("parseURL(%q): %v", g.raw, err)
			continue
		}
		if strings.Join(got.addrs, ",") != strings.Join(g.want.addrs, ",") || got.scheme != g.want.scheme || got.tls != g.want.tls ||
			got.user != g.want.user || got.password != g.want.password || got.db != g.want.db || got.dsn != g.want.dsn || got.namespace != g.want.namespace {
			t.Errorf("parseURL(%q) = %+v, want %+v", g.raw, got, g.want)
		}
	}
	bad := map[string]string{
		"":                                   "empty",
		"localhost:6379":                     "no host",
		"http://h:80":                        `unknown scheme "http"`,
		"redis://h":                          "needs host:port",
		"redis://h:99999":                    "bad port",
		"redis://a:1,b:2":                    "redis+cluster://",
		"redis://h:1/x":                      "not a number",
		"redis://h:1?db=2":                   `unknown parameter "db"`,
		"redis+cluster://h:1/2":              "no database",
		"mysql://h:3306":                     "want mysql://",
		"zk://h:2181":                        "no root path",
		"zk://h:2181/r?namespace=x":          "no parameters",
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
