package etcdsimba

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba/session/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// When the watch restarts from now (after a compaction, or after the store
// went back), its empty notice must come once the new watch exists: a
// waiter that attempts on it and finds the name held must hear the delete
// that follows. Before, the notice came first, and a delete between it and
// the new watch woke nobody until the periodic retry. The subscriber
// deletes the key from inside the empty notice's delivery, which runs on
// the watch goroutine: exactly that gap.
func TestWatchRestartNoticeAfterTheNewWatch(t *testing.T) {
	eps := os.Getenv("SIMBA_ETCD_ENDPOINTS")
	if eps == "" {
		t.Fatal("SIMBA_ETCD_ENDPOINTS is not set: run `make services` and `. .services/env` (etcd tests need a real server)")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ns := "/simba-test/watch-restart-" + time.Now().Format("150405.000000000")
	b, err := New(cli, ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer func() { _ = b.Shutdown(context.Background()) }()
	defer func() { _, _ = cli.Delete(context.Background(), ns+"/", clientv3.WithPrefix()) }()
	key := b.k.lease + "y"
	if _, err := cli.Put(ctx, key, "held by someone"); err != nil {
		t.Fatal(err)
	}
	var armed, deleted atomic.Bool
	heard := make(chan struct{}, 1)
	stop, err := b.Subscribe(func(n driver.Notice) {
		switch {
		case n.Name == "" && armed.Swap(false):
			// A waiter's attempt found "y" held; its holder releases now.
			if _, err := cli.Delete(ctx, key); err == nil {
				deleted.Store(true)
			}
		case n.Name == "y":
			select {
			case heard <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	armed.Store(true)
	b.w.restart()
	select {
	case <-heard:
	case <-time.After(3 * time.Second):
		t.Fatalf("no notice for the delete that followed the restart's empty notice (deleted: %v)", deleted.Load())
	}
}

// The watch carries no previous values (ADR 0326): a delete event of a
// name at revision d drops the name from every session of the backend
// that owns it under a key created before d (the key deleted, or one
// deleted earlier), and leaves a term whose key was created after d (a
// late event of an earlier key: the name was released and acquired again
// before the watch delivered the release).
func TestDeleteEventDropsOnlyOlderKeys(t *testing.T) {
	eps := os.Getenv("SIMBA_ETCD_ENDPOINTS")
	if eps == "" {
		t.Fatal("SIMBA_ETCD_ENDPOINTS is not set: run `make services` and `. .services/env` (etcd tests need a real server)")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, err := New(cli, "/simba-test/delete-event")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	ep := &epoch{rec: record{Start: uint64(now)}, rev: 100}
	session := func(id driver.ID, name string, created int64) *esession {
		tok, err := ep.token(created, now)
		if err != nil {
			t.Fatal(err)
		}
		s := &esession{id: id, ep: ep, owned: map[string]uint64{name: tok}, marked: map[string]time.Duration{name: time.Second}, version: 1}
		b.sessions[id] = s
		return s
	}
	old, fresh := session("0000000000000001", "x", 110), session("0000000000000002", "y", 130)
	b.deleted("x", 120)
	b.deleted("y", 120)
	if _, ok := old.owned["x"]; ok || old.version != 2 {
		t.Errorf("x, created at 110, deleted at 120: still owned (version %d)", old.version)
	}
	if _, ok := old.marked["x"]; ok {
		t.Error("x deleted: its marker delay is still recorded")
	}
	if _, ok := fresh.owned["y"]; !ok || fresh.version != 1 {
		t.Errorf("y, created at 130: dropped by the event of a delete at 120 (version %d)", fresh.version)
	}
	b.deleted("z", 200) // owned by nobody
	if fresh.version != 1 {
		t.Errorf("a delete of a name nobody owns changed a session (version %d)", fresh.version)
	}
}
