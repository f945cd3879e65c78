package simbatest_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/simbatest"
)

func TestMain(m *testing.M) {
	if os.Getenv(errorsChild) != "" {
		errorsChildMain() // the process TestErrorTexts* start
	}
	goleak.VerifyTestMain(m)
}

// openClose opens a Simba session on b and closes it: the backend works.
func openClose(t *testing.T, b session.Backend) {
	t.Helper()
	s, err := session.Open(t.Context(), b, session.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestServers starts each server the kit offers and opens a session on the
// backend it returns.
func TestServers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) session.Backend
	}{
		{"redis", func(t *testing.T) session.Backend {
			s := simbatest.Redis(t)
			if err := s.Client.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return s.Backend
		}},
		{"redis-cluster", func(t *testing.T) session.Backend { return simbatest.Redis(t, simbatest.WithCluster()).Backend }},
		{"postgres", func(t *testing.T) session.Backend { return simbatest.Postgres(t).Backend }},
		{"mysql", func(t *testing.T) session.Backend { return simbatest.MySQL(t).Backend }},
		{"zookeeper", func(t *testing.T) session.Backend { return simbatest.ZooKeeper(t).Backend }},
		{"zookeeper-ensemble", func(t *testing.T) session.Backend { return simbatest.ZooKeeper(t, simbatest.WithCluster()).Backend }},
		{"etcd", func(t *testing.T) session.Backend {
			s := simbatest.Etcd(t)
			if _, err := s.Client.Put(context.Background(), s.Prefix()+"/app/k", "v"); err != nil {
				t.Fatal(err)
			}
			return s.Backend
		}},
		{"etcd-cluster", func(t *testing.T) session.Backend { return simbatest.Etcd(t, simbatest.WithCluster()).Backend }},
		{"memory", func(t *testing.T) session.Backend { return simbatest.Memory(t).NewClient() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			openClose(t, tc.start(t))
		})
	}
}
