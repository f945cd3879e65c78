package simbatest_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/simbatest"
)

func TestMain(m *testing.M) {
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

func TestServers(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		s := simbatest.Redis(t)
		openClose(t, s.Backend)
		if err := s.Client.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("redis-cluster", func(t *testing.T) {
		t.Parallel()
		s := simbatest.Redis(t, simbatest.WithCluster())
		openClose(t, s.Backend)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s := simbatest.Postgres(t)
		openClose(t, s.Backend)
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		s := simbatest.MySQL(t)
		openClose(t, s.Backend)
	})
	t.Run("zookeeper", func(t *testing.T) {
		t.Parallel()
		s := simbatest.ZooKeeper(t)
		openClose(t, s.Backend)
	})
	t.Run("zookeeper-ensemble", func(t *testing.T) {
		t.Parallel()
		s := simbatest.ZooKeeper(t, simbatest.WithCluster())
		openClose(t, s.Backend)
	})
	t.Run("memory", func(t *testing.T) {
		openClose(t, simbatest.Memory(t).NewClient())
	})
}
