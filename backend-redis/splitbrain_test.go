package redissimba_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Split brain (ADR 0216): the old master is cut from its replica and from
// Sentinel, a client still connected to it keeps renewing, and the
// replica is promoted on the other side. The quarantine on the promoted
// node covers the holders whose records it lacks, not a holder that goes
// on renewing on the old master: only the old master refusing writes
// (min-replicas-to-write) or WithWaitReplicas ends that holder's term.

// splitBrain runs the scenario and returns how long the old holder H
// could still believe in x after W, on the promoted replica, was granted
// it: positive is two holders. promoteAfter stands for Sentinel's
// down-after-milliseconds (plus its election), aArgs configure the old
// master.
func splitBrain(t *testing.T, promoteAfter time.Duration, aArgs ...string) time.Duration {
	return splitBrainBy(t, false, promoteAfter, aArgs...)
}

// splitBrainBy is splitBrain with the promotion done by hand after
// promoteAfter, or, with sentinel, by a real Redis Sentinel that watches A
// through a proxy cut with B's link and has promoteAfter as its
// down-after-milliseconds; W then reaches B through go-redis's failover
// client.
func splitBrainBy(t *testing.T, sentinel bool, promoteAfter time.Duration, aArgs ...string) time.Duration {
	t.Helper()
	const maxLease = 2 * time.Second
	a := startServer(t, append([]string{"--repl-diskless-sync-delay", "0"}, aArgs...)...)
	link := startProxy(t, a.addr())
	host, port, err := net.SplitHostPort(link.addr())
	if err != nil {
		t.Fatal(err)
	}
	b := startServer(t, "--repl-diskless-sync-delay", "0", "--replicaof", host, port)
	ac, bc := a.client(a.addr()).(*redis.Client), b.client(b.addr()).(*redis.Client)
	pollUntil(t, 10*time.Second, "a good replica for min-replicas-to-write", func() bool {
		v := infoField(ac, "replication", "min_slaves_good_slaves")
		return v == "" || v == "1" // "": min-replicas-to-write 0
	})
	waitAcked(t, ac)
	var sen *server
	var senLink *proxy
	if sentinel {
		senLink = startProxy(t, a.addr())
		_, sp, err := net.SplitHostPort(senLink.addr())
		if err != nil {
			t.Fatal(err)
		}
		spn, _ := strconv.Atoi(sp)
		sen = startSentinelOn(t, spn, int(promoteAfter.Milliseconds()))
		sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = sc.Close() })
		pollUntil(t, 15*time.Second, "the Sentinel knows the replica", func() bool {
			rs, err := sc.Replicas(ctxT(t), "m").Result()
			return err == nil && len(rs) == 1 && rs[0]["port"] == strconv.Itoa(b.port)
		})
	}

	ns := namespace(t)
	hb := newBackend(t, ac, ns, redissimba.WithMaxLease(maxLease))
	opened := time.Now()
	h := open(t, hb, maxLease)
	if tok := acquire(t, hb, h, "x")[0]; tok == 0 {
		t.Fatal("x not granted to H")
	}
	waitAcked(t, ac) // B has x: nothing is lost, only split

	// H's client stays on A's side and renews every 100 ms; believedUntil
	// is the end of the lease of its last successful renewal, measured
	// from the renewal's send.
	var mu sync.Mutex
	believedUntil := opened.Add(maxLease)
	renewals, lastErr := 0, error(nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			sent := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			r, err := hb.Renew(cctx, driver.RenewRequest{ID: h})
			cancel()
			mu.Lock()
			if err == nil && r.Remaining > 0 {
				believedUntil = sent.Add(r.Remaining)
				renewals++
			} else {
				lastErr = err
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	link.setSilent(true) // A stops hearing from its replica (and, say, Sentinel): no FIN, only lag
	var wc redis.UniversalClient = bc
	if sentinel {
		senLink.setSilent(true)
		sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = sc.Close() })
		pollUntil(t, 60*time.Second, "the Sentinel promotes B", func() bool {
			m, err := sc.GetMasterAddrByName(ctxT(t), "m").Result()
			return err == nil && len(m) == 2 && m[1] == strconv.Itoa(b.port) && infoField(bc, "replication", "role") == "master"
		})
		fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = fc.Close() })
		wc = fc
	} else {
		waitTimer(promoteAfter)
		replicaOf(t, bc, nil) // Sentinel promotes B on the other side
	}

	wb := newUninitialised(t, wc, ns, redissimba.WithMaxLease(maxLease))
	w := open(t, wb, maxLease)
	var granted time.Time
	for deadline := time.Now().Add(3 * maxLease); granted.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatal("W never got x on the promoted replica")
		}
		sent := time.Now()
		r, err := wb.Acquire(ctxT(t), driver.AcquireRequest{ID: w, Names: []string{"x"}})
		if err != nil {
			t.Fatalf("W's Acquire on B: %v", err)
		}
		if r.Results[0].Token != 0 {
			granted = sent // the grant happened at or after the send
			break
		}
		renew(t, wb, w, 0)
		waitTimer(100 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	t.Logf("H renewed %d times; last refusal: %v", renewals, lastErr)
	return believedUntil.Sub(granted)
}

// TestSplitBrainWithoutMinReplicasTwoHolders pins what the server check's
// warning says: with replicas and min-replicas-to-write 0, a holder on
// the old master renews through the whole partition, and the promoted
// replica hands its lease to another session after the quarantine.
func TestSplitBrainWithoutMinReplicasTwoHolders(t *testing.T) {
	if over := splitBrain(t, 3*time.Second); over <= 0 {
		t.Fatalf("H stopped believing %v before W's grant without min-replicas-to-write: the warning and ADR 0216 overstate the risk", -over)
	} else {
		t.Logf("two holders for %v (H renews on the old master)", over)
	}
}

// TestSplitBrainMinReplicasKeepsExclusion: with min-replicas-to-write 1
// and min-replicas-max-lag 1 on the master, and the promotion at least
// max-lag + 2 s after the cut (Sentinel's down-after-milliseconds), the old
// master refuses H's renewals before the promotion, and H's last lease
// ends before the quarantine on the promoted node lets W in
// (docs/deployment/redis.md, ADR 0216).
func TestSplitBrainMinReplicasKeepsExclusion(t *testing.T) {
	if over := splitBrain(t, 4*time.Second, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"); over > 0 {
		t.Fatalf("H could believe in x %v after W was granted it: two holders", over)
	} else {
		t.Logf("H stopped believing %v before W's grant", -over)
	}
}

// TestSentinelSplitBrainMinReplicasKeepsExclusion is the same through a
// real Redis Sentinel that loses A with the replica (down-after 4 s) and
// promotes B, W reaching B through go-redis's failover client.
func TestSentinelSplitBrainMinReplicasKeepsExclusion(t *testing.T) {
	if over := splitBrainBy(t, true, 4*time.Second, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"); over > 0 {
		t.Fatalf("H could believe in x %v after W was granted it: two holders", over)
	} else {
		t.Logf("H stopped believing %v before W's grant", -over)
	}
}

// TestSplitBrainLagAboveFailoverDelayTwoHolders: min-replicas-to-write
// alone is not enough: with min-replicas-max-lag 5 and a promotion 3 s
// after the cut, the old master still takes H's renewals after it.
func TestSplitBrainLagAboveFailoverDelayTwoHolders(t *testing.T) {
	if over := splitBrain(t, 3*time.Second, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "5"); over <= 0 {
		t.Fatalf("H stopped believing %v before W's grant with max-lag above the failover delay: ADR 0216's bound is wrong", -over)
	} else {
		t.Logf("two holders for %v", over)
	}
}

// TestPartialResyncNoQuarantine: a short drop of the replica's link ends
// in a partial resynchronisation (PSYNC), which changes neither node's
// history: the master keeps its master_replid, and Acquires there go on
// without a quarantine.
func TestPartialResyncNoQuarantine(t *testing.T) {
	const maxLease = 2 * time.Second
	p := startReplicaPair(t)
	ns := namespace(t)
	b := newBackend(t, p.ac, ns, redissimba.WithMaxLease(maxLease))
	id := open(t, b, maxLease)
	if tok := acquire(t, b, id, "x")[0]; tok == 0 {
		t.Fatal("x not granted")
	}
	before := replID(t, p.ac)
	syncs := infoField(p.ac, "stats", "sync_partial_ok")
	p.link.setCut(true)
	waitTimer(500 * time.Millisecond)
	p.link.setCut(false)
	pollUntil(t, 15*time.Second, "a partial resync", func() bool {
		return infoField(p.ac, "stats", "sync_partial_ok") != syncs
	})
	waitAcked(t, p.ac)
	if after := replID(t, p.ac); after != before {
		t.Fatalf("master_replid %s -> %s after a partial resync", before, after)
	}
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: id, Names: []string{"y"}})
	if err != nil || r.Quarantine != 0 || r.Results[0].Token == 0 {
		t.Fatalf("Acquire after a partial resync = %+v, %v; want y granted, no quarantine", r, err)
	}
}
