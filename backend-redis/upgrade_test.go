package redissimba_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/session/driver"
)

// Upgrading from a version without the lineage key (ADR 0163, amended):
// an epoch without a lineage, written by the process that serves it, is
// adopted without a quarantine when that process was never promoted since
// it started and has run for more than a maximum lease; otherwise it is
// quarantined once (why "unrecorded").

// earlierVersion deletes ns's lineage key, leaving the epoch as a version
// before ADR 0163 wrote it.
func earlierVersion(t *testing.T, c redis.UniversalClient, ns string) {
	t.Helper()
	if n, err := c.Del(ctxT(t), "simba:{"+ns+"}:lineage").Result(); err != nil || n != 1 {
		t.Fatalf("DEL lineage: %d, %v", n, err)
	}
}

// TestUpgradeAdoptsLineageOnAnUnpromotedServer: on a server up for longer
// than a maximum lease and never promoted, the upgrade costs no
// quarantine; the held lease stays its holder's, and the lineage is
// recorded.
func TestUpgradeAdoptsLineageOnAnUnpromotedServer(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	upFor(t, c, initLease+time.Second) // uptime is whole seconds that may run one ahead
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(initLease))
	h := open(t, b, initLease)
	tx := acquire(t, b, h, "x")[0]
	earlierVersion(t, c, ns)

	w := open(t, b, initLease)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: w, Names: []string{"x", "y"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Quarantine != 0 || r.Results[1].Token == 0 {
		t.Fatalf("first Acquire after the upgrade = %+v: quarantined, on a server never promoted and up for more than a maximum lease", r)
	}
	if r.Results[0].Token != 0 {
		t.Fatalf("x granted to W (%d) while H holds it (%d)", r.Results[0].Token, tx)
	}
	if got := renew(t, b, h, 0); len(got.Leases) != 1 || got.Leases[0].Token != tx {
		t.Fatalf("H after the upgrade: %+v, want x under %d", got, tx)
	}
	if l, err := c.HGet(ctxT(t), "simba:{"+ns+"}:lineage", "h").Result(); err != nil || l != replID(t, c) {
		t.Fatalf("lineage after the upgrade = %q, %v; want the server's master_replid", l, err)
	}
}

// TestUpgradeQuarantinesAfterAPromotion: the serving process was promoted
// since it started (a failover and back, say): its history may lack
// grants, and the upgrade quarantines once.
func TestUpgradeQuarantinesAfterAPromotion(t *testing.T) {
	p := startReplicaPair(t)
	replicaOf(t, p.bc, nil) // B promoted: master_replid2 set
	upFor(t, p.bc, initLease+time.Second)
	ns := namespace(t)
	b := newBackend(t, p.bc, ns, redissimba.WithMaxLease(initLease))
	earlierVersion(t, p.bc, ns)
	o := open(t, b, initLease)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x"}})
	if err != nil || r.Quarantine <= 0 || r.Results[0].Token != 0 {
		t.Fatalf("first Acquire after the upgrade on a promoted server = %+v, %v; want a quarantine", r, err)
	}
}

// TestUpgradeQuarantinesOnAYoungServer: the earlier version's Init
// created epochs without checks, so on a server up for less than a
// maximum lease the epoch may be one that Init wrote right after a
// restart without persistence: the upgrade quarantines once.
func TestUpgradeQuarantinesOnAYoungServer(t *testing.T) {
	const lease = time.Hour // the server is young for all of the test
	s := startServer(t)
	c := s.client(s.addr())
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(lease))
	earlierVersion(t, c, ns)
	o := open(t, b, time.Second)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x"}})
	if err != nil || r.Quarantine <= 0 || r.Results[0].Token != 0 {
		t.Fatalf("first Acquire after the upgrade on a young server = %+v, %v; want a quarantine", r, err)
	}
}

// TestUpgradeQuarantinesAfterAFlush: the earlier version's Init, run after
// a FLUSHALL on a server up for long, created an epoch of the serving
// process without checks while holders from before the flush still
// believed: a flush since the start keeps the upgrade's quarantine.
func TestUpgradeQuarantinesAfterAFlush(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	upFor(t, c, initLease+time.Second)
	if err := c.FlushAll(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	b := newBackend(t, c, ns, redissimba.WithMaxLease(initLease)) // ForceInit, as the earlier Init did
	earlierVersion(t, c, ns)
	o := open(t, b, initLease)
	r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"x"}})
	if err != nil || r.Quarantine <= 0 || r.Results[0].Token != 0 {
		t.Fatalf("first Acquire after the upgrade on a flushed server = %+v, %v; want a quarantine", r, err)
	}
}
