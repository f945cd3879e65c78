package simbatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/simbatest"
)

// TestEtcdClusterLeaderKilled: the three-member cluster is a real one. Its
// leader killed, the other two elect another and an election is still won
// through a new backend; the killed member restarts with its data and
// rejoins (three members serve again).
func TestEtcdClusterLeaderKilled(t *testing.T) {
	etcd := simbatest.Etcd(t, simbatest.WithCluster())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if len(etcd.Nodes) != 3 || len(etcd.Endpoints()) != 3 {
		t.Fatalf("%d nodes, endpoints %v: want three members", len(etcd.Nodes), etcd.Endpoints())
	}
	if _, err := etcd.Client.Put(ctx, etcd.Prefix()+"/app/before", "v"); err != nil {
		t.Fatal(err)
	}
	leader := etcd.Leader(ctx)
	if leader == nil {
		t.Fatal("no member leads a ready cluster")
	}
	if err := leader.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	var next *simbatest.Node
	for deadline := time.Now().Add(30 * time.Second); next == nil || next == leader; {
		if time.Now().After(deadline) {
			t.Fatal("no new leader within 30s of the leader's kill")
		}
		time.Sleep(100 * time.Millisecond)
		next = etcd.Leader(ctx)
	}
	job := &reportJob{}
	startApp(t, etcd.NewBackend(t), job)
	waitFor(t, func() bool { return job.runs.Load() == 1 })
	if err := leader.Start(ctx); err != nil {
		t.Fatalf("the killed member does not serve again: %v", err)
	}
	r, err := etcd.NewClient(t).Get(ctx, etcd.Prefix()+"/app/before")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the key written before the kill: %v, %v", r, err)
	}
}
