package etcdsimba_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var zapNop = zap.NewNop()

// endpoints reads an endpoint list from the environment variable name (set
// by `make services`), failing the test loudly when it is missing.
func endpoints(t testing.TB, name string) []string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run `make services` and `. .services/env` (etcd tests need a real server)", name)
	}
	return strings.Split(v, ",")
}

func single(t testing.TB) []string { return endpoints(t, "SIMBA_ETCD_ENDPOINTS") }

// newClient is a client of eps, closed when the test ends.
func newClient(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zapNop})
	if err != nil {
		t.Fatalf("clientv3.New(%v): %v", eps, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newNamespace is a namespace of its own for one test.
func newNamespace(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "/simba-test/" + hex.EncodeToString(b[:])
}

func quietLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if _, bench := t.(*testing.B); bench {
		level = slog.LevelError + 1
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newBackendNoInit is a backend over cli for ns, shut down when the test
// ends.
func newBackendNoInit(t testing.TB, cli *clientv3.Client, ns string, opts ...etcdsimba.Option) *etcdsimba.Backend {
	t.Helper()
	b, err := etcdsimba.New(cli, ns, append([]etcdsimba.Option{etcdsimba.WithLogger(quietLogger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	return b
}

// newBackend is newBackendNoInit, initialised: test namespaces are new.
func newBackend(t testing.TB, cli *clientv3.Client, ns string, opts ...etcdsimba.Option) *etcdsimba.Backend {
	t.Helper()
	b := newBackendNoInit(t, cli, ns, opts...)
	if err := b.Init(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
