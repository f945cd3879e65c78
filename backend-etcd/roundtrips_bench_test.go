package etcdsimba_test

import (
	"context"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// rpcCounter counts the unary gRPC calls a client sends, by method.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[path.Base(method)]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) reset() {
	c.mu.Lock()
	c.n = map[string]int{}
	c.mu.Unlock()
}

// report puts the calls per operation, by method, beside the benchmark's
// figures.
func (c *rpcCounter) report(b *testing.B) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	methods := make([]string, 0, len(c.n))
	for m, n := range c.n {
		total += n
		methods = append(methods, m)
	}
	sort.Strings(methods)
	for _, m := range methods {
		b.ReportMetric(float64(c.n[m])/float64(b.N), strings.ToLower(m)+"/op")
	}
	b.ReportMetric(float64(total)/float64(b.N), "rpcs/op")
}

func countingClient(b *testing.B) (*clientv3.Client, *rpcCounter) {
	c := &rpcCounter{n: map[string]int{}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: single(b), DialTimeout: 5 * time.Second, Logger: zapNop,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.intercept)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	return cli, c
}

// BenchmarkRoundTrips counts the requests one acquire + release sends:
// through the SPI (driver), through lock.TryAcquire + Close (the engine
// included), and etcd's raw pair for comparison (issue 24, ADR 0326).
func BenchmarkRoundTrips(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		cli, c := countingClient(b)
		ctx := context.Background()
		gr, err := cli.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		key := newNamespace(b) + "/raw"
		c.reset()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, "v", clientv3.WithLease(gr.ID))).Commit(); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Delete(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.report(b)
	})
	b.Run("driver", func(b *testing.B) {
		cli, c := countingClient(b)
		be := newBackend(b, cli, newNamespace(b))
		ctx := context.Background()
		r, err := be.Open(ctx, driver.OpenRequest{LeaseDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		c.reset()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			a, err := be.Acquire(ctx, driver.AcquireRequest{ID: r.ID, Names: []string{"x"}})
			if err != nil || a.Results[0].Token == 0 {
				b.Fatalf("Acquire: %v %+v", err, a)
			}
			if err := be.Release(ctx, driver.ReleaseRequest{ID: r.ID, Leases: []driver.Lease{{Name: "x", Token: a.Results[0].Token}}}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.report(b)
	})
	b.Run("lock", func(b *testing.B) {
		cli, c := countingClient(b)
		be := newBackend(b, cli, newNamespace(b))
		s := openEngine(b, be, 15*time.Second)
		ctx := context.Background()
		c.reset()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			h, err := lock.TryAcquire(ctx, s, "x")
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.report(b)
	})
}
