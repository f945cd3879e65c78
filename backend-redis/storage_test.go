package redissimba_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/session/driver"
)

// No per-name state outlives a term (ADR 0245): a released or closed
// name leaves no lease key and no index entry; an expired owner's record
// goes at its takeover or at the sweep; tokens rise through the
// namespace's high-water mark.

// nsKeys lists ns's keys (SCAN over the test's own namespace; on a
// Cluster every key of ns is on one node, the one serving its slot).
func nsKeys(t *testing.T, c redis.UniversalClient, ns string) []string {
	t.Helper()
	var out []string
	scan := func(n *redis.Client) {
		it := n.Scan(ctxT(t), 0, "simba:{"+ns+"}:*", 1000).Iterator()
		for it.Next(ctxT(t)) {
			out = append(out, it.Val())
		}
		if err := it.Err(); err != nil {
			t.Fatalf("SCAN: %v", err)
		}
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		n, err := cc.MasterForKey(ctxT(t), "simba:{"+ns+"}:epoch")
		if err != nil {
			t.Fatal(err)
		}
		scan(n)
	case *redis.Client:
		scan(cc)
	default:
		t.Fatalf("client %T", c)
	}
	slices.Sort(out)
	return out
}

// baseline is what a namespace keeps whatever its names: the epoch, the
// lineage and the high-water mark.
func baseline(ns string) []string {
	p := "simba:{" + ns + "}:"
	return []string{p + "epoch", p + "hw", p + "lineage"}
}

// wantBaseline fails unless ns holds its baseline keys plus the sessions
// listed.
func wantBaseline(t *testing.T, c redis.UniversalClient, ns string, sessions ...driver.ID) {
	t.Helper()
	want := baseline(ns)
	for _, s := range sessions {
		want = append(want, "simba:{"+ns+"}:s:"+string(s))
	}
	slices.Sort(want)
	if got := nsKeys(t, c, ns); !slices.Equal(got, want) {
		t.Fatalf("namespace keys = %q, want %q", got, want)
	}
}

func TestReleaseAndCloseLeaveNoRecord(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns)
		a := open(t, b, 10*time.Second)
		toks := acquire(t, b, a, "x", "y", "z")
		release(t, b, a, "x", toks[0])
		if err := b.Release(ctxT(t), driver.ReleaseRequest{ID: a, Leases: []driver.Lease{{Name: "y", Token: toks[1]}, {Name: "z", Token: toks[2]}}}); err != nil {
			t.Fatal(err)
		}
		wantBaseline(t, c, ns, a)

		o := open(t, b, 10*time.Second)
		acquire(t, b, o, "x", "p:1", "p:2")
		if err := b.Close(ctxT(t), o); err != nil {
			t.Fatal(err)
		}
		wantBaseline(t, c, ns, a)
	})
}

// TestTokensRiseAboveTheHighWaterMark: the high-water mark, not the
// clock, makes a name's tokens rise across release and re-acquire. A mark
// set an hour ahead stands for a Redis clock stepped back by an hour.
func TestTokensRiseAboveTheHighWaterMark(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	a := open(t, b, 10*time.Second)
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := c.Set(ctxT(t), "simba:{"+ns+"}:hw", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	last := ahead
	for i := range 3 {
		tok := acquire(t, b, a, "x")[0]
		if tok <= last {
			t.Fatalf("grant %d of x = %d, want > %d (the high-water mark or the previous grant)", i, tok, last)
		}
		release(t, b, a, "x", tok)
		last = tok
	}
	// Another name shares the mark: its grant too is above x's last.
	if tok := acquire(t, b, a, "y")[0]; tok <= last {
		t.Fatalf("y = %d, want > %d", tok, last)
	}
}

// earlierRecord writes a lease record as an earlier version leaves a
// released name: the last token, no owner, an index entry.
func earlierRecord(t *testing.T, c redis.UniversalClient, ns, name string, tok uint64) {
	t.Helper()
	p := "simba:{" + ns + "}:"
	if err := c.HSet(ctxT(t), p+"l:"+name, "t", strconv.FormatUint(tok, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctxT(t), p+"names", redis.Z{Member: name}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestGrantAboveAnEarlierRecord: a record an earlier version left (a
// token far above the clock and the mark) still bounds the name's next
// token from below.
func TestGrantAboveAnEarlierRecord(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	far := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	earlierRecord(t, c, ns, "x", far)
	a := open(t, b, 10*time.Second)
	if tok := acquire(t, b, a, "x")[0]; tok <= far {
		t.Fatalf("x = %d, want > %d (its earlier record's token)", tok, far)
	}
}

// TestSweepDeletesExpiredRecordsOnly: the sweep deletes the records of an
// expired owner's names and of an earlier version's released names, and
// leaves a live holder's; the mark is raised to every deleted token
// first, so the names' next tokens are above them.
func TestSweepDeletesExpiredRecordsOnly(t *testing.T) {
	forModes(t, func(t *testing.T, c redis.UniversalClient) {
		ns := namespace(t)
		b := newBackend(t, c, ns)
		lease := 200 * time.Millisecond
		dead := open(t, b, lease)
		live := open(t, b, 10*time.Second)
		dt := acquire(t, b, dead, "d:1", "d:2", "d:3")
		lt := acquire(t, b, live, "live")[0]
		far := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
		earlierRecord(t, c, ns, "old", far)
		waitTimer(lease + 100*time.Millisecond)
		gone, err := b.Sweep(ctxT(t), 10)
		if err != nil || gone != 4 {
			t.Fatalf("Sweep = %d, %v; want the 3 expired records and the earlier version's", gone, err)
		}
		wantLive := append(baseline(ns), "simba:{"+ns+"}:l:live", "simba:{"+ns+"}:names", "simba:{"+ns+"}:s:"+string(live))
		slices.Sort(wantLive)
		if got := nsKeys(t, c, ns); !slices.Equal(got, wantLive) {
			t.Fatalf("after the sweep: %q, want %q", got, wantLive)
		}
		w := open(t, b, 10*time.Second)
		if tok := acquire(t, b, w, "live")[0]; tok != 0 {
			t.Fatalf("live holder's name granted to another (%d) after the sweep", tok)
		}
		if r := renew(t, b, live, 0); len(r.Leases) != 1 || r.Leases[0].Token != lt {
			t.Fatalf("live holder after the sweep: %+v", r.Leases)
		}
		o := open(t, b, 10*time.Second)
		toks := acquire(t, b, o, "old", "d:1")
		if toks[0] <= far || toks[1] <= far || toks[1] <= dt[0] {
			t.Fatalf("after the sweep: old = %d, d:1 = %d; want both > %d (the deleted record's token, raised into the mark)", toks[0], toks[1], far)
		}
		if err := b.Close(ctxT(t), o); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(ctxT(t), live); err != nil {
			t.Fatal(err)
		}
		wantBaseline(t, c, ns, w)
	})
}

// TestSweepWaitsForThisLayout: while the namespace's lineage is still an
// earlier version's (no grant of this version yet), processes of that
// version may read a missing record as a new name, so the sweep deletes
// nothing.
func TestSweepWaitsForThisLayout(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	p := "simba:{" + ns + "}:"
	if err := c.Del(ctxT(t), p+"lineage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctxT(t), p+"lineage", replID(t, c), 0).Err(); err != nil {
		t.Fatal(err)
	}
	earlierRecord(t, c, ns, "old", 7)
	if gone, err := b.Sweep(ctxT(t), 10); err != nil || gone != 0 {
		t.Fatalf("Sweep on an earlier version's layout = %d, %v; want 0", gone, err)
	}
}

// TestSweepRunsFromAcquire: without any explicit sweep, the records of
// expired owners go as Acquires go on (one bounded step every
// sweepEvery calls).
func TestSweepRunsFromAcquire(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	lease := 200 * time.Millisecond
	dead := open(t, b, lease)
	names := make([]string, 100)
	for i := range names {
		names[i] = "e:" + strconv.Itoa(i)
	}
	acquire(t, b, dead, names...)
	waitTimer(lease + 100*time.Millisecond)
	o := open(t, b, 10*time.Second)
	for i := 0; i < 64*4; i++ {
		acquire(t, b, o, "busy")
	}
	for _, k := range nsKeys(t, c, ns) {
		if strings.Contains(k, ":l:e:") {
			t.Fatalf("after 256 Acquires the expired record %s is still there", k)
		}
	}
}

// earlierAcquire runs the previous version's acquire script (testdata,
// as released before ADR 0245) for session id and one name.
func earlierAcquire(t *testing.T, c redis.UniversalClient, ns string, id driver.ID, name string) (any, error) {
	t.Helper()
	src, err := os.ReadFile("testdata/acquire-earlier.lua")
	if err != nil {
		t.Fatal(err)
	}
	p := "simba:{" + ns + "}:"
	ks := []string{p + "s:" + string(id), p + "names", p + "epoch", p + "l:" + name, p + "lineage"}
	return c.Eval(ctxT(t), string(src), ks, string(id), p+"s:", 30000, 1, "1", name, 0).Result()
}

// TestEarlierVersionRefusedAfterTheFirstGrant: the previous version's
// acquire runs beside this one until this version's first grant records
// the layout; from then on it fails loudly before it writes anything, so
// it never reads a record this version deleted as a new name.
func TestEarlierVersionRefusedAfterTheFirstGrant(t *testing.T) {
	s := startServer(t)
	c := s.client(s.addr())
	ns := namespace(t)
	b := newBackend(t, c, ns)
	p := "simba:{" + ns + "}:"
	// The namespace as the earlier version's Init left it.
	if err := c.Del(ctxT(t), p+"lineage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctxT(t), p+"lineage", replID(t, c), 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := open(t, b, 10*time.Second)
	res, err := earlierAcquire(t, c, ns, old, "a")
	if err != nil {
		t.Fatalf("earlier version before the upgrade: %v, %v", res, err)
	}
	if out, ok := res.([]any); !ok || len(out) != 1 {
		t.Fatalf("earlier version before the upgrade: %v", res)
	}
	n := open(t, b, 10*time.Second)
	if tok := acquire(t, b, n, "b")[0]; tok == 0 {
		t.Fatal("this version's first grant refused")
	}
	res, err = earlierAcquire(t, c, ns, old, "c")
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("earlier version after this version's first grant = %v, %v; want a WRONGTYPE error", res, err)
	}
	if x, err := c.Exists(ctxT(t), p+"l:c").Result(); err != nil || x != 0 {
		t.Fatalf("the refused earlier acquire wrote c's record: %d, %v", x, err)
	}
	// The lineage kept its history: no quarantine for this version.
	o := open(t, b, 10*time.Second)
	if r, err := b.Acquire(ctxT(t), driver.AcquireRequest{ID: o, Names: []string{"d"}}); err != nil || r.Quarantine != 0 || r.Results[0].Token == 0 {
		t.Fatalf("after the conversion: %+v, %v", r, err)
	}
}

// TestInspectByPrefixAfterRelease: the index lists the names with a
// record, and inspection by prefix still finds every held one.
func TestInspectByPrefixAfterRelease(t *testing.T) {
	c := standalone(t)
	ns := namespace(t)
	b := newBackend(t, c, ns)
	a := open(t, b, 10*time.Second)
	toks := acquire(t, b, a, "job.1", "job.2", "job.3", "other")
	release(t, b, a, "job.2", toks[1])
	hs, err := b.Inspect(ctxT(t), driver.InspectRequest{Prefix: "job."})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Name)
	}
	if !slices.Equal(got, []string{"job.1", "job.3"}) {
		t.Fatalf("Inspect(job.) = %q, want job.1 and job.3", got)
	}
	if n, err := c.ZCard(ctxT(t), "simba:{"+ns+"}:names").Result(); err != nil || n != 3 {
		t.Fatalf("index holds %d names, %v; want the 3 held", n, err)
	}
}

// TestRollbackToTheEarlierVersion: the rollback ADR 0245 described (DEL
// the lineage, run the earlier Init) does not quarantine: the epoch is
// there, so the earlier Init answers "exists", and the earlier acquire,
// finding no lineage on a server up for more than a maximum lease and
// never flushed, adopts the history and grants at once (ADR 0282). A name
// this version holds stays refused to it (the record format is the
// same); a name this version released has no record, so its next token
// rests on the Redis clock alone.
func TestRollbackToTheEarlierVersion(t *testing.T) {
	c := standalone(t) // up for long: the adoption's condition
	ns := namespace(t)
	b := newBackend(t, c, ns)
	h := open(t, b, 10*time.Second)
	tx := acquire(t, b, h, "x", "z")
	release(t, b, h, "z", tx[1])
	if err := c.Del(ctxT(t), "simba:{"+ns+"}:lineage").Err(); err != nil {
		t.Fatal(err)
	}
	old := open(t, b, 10*time.Second)
	res, err := earlierAcquire(t, c, ns, old, "y")
	if out, ok := res.([]any); err != nil || !ok || len(out) != 1 {
		t.Fatalf("earlier version's first Acquire after the rollback = %v, %v; want a grant, no quarantine", res, err)
	}
	// Refused: "?" (the owner's key undeclared, asked again with it) or "-".
	if res, err := earlierAcquire(t, c, ns, old, "x"); err != nil || res.([]any)[0] != "?"+string(h) {
		t.Fatalf("earlier version's Acquire of x, held by this version = %v, %v; want refused", res, err)
	}
	res, err = earlierAcquire(t, c, ns, old, "z")
	if s, _ := res.([]any)[0].(string); err != nil || strings.Trim(s, "0123456789") != "" {
		t.Fatalf("earlier version's Acquire of z (released by this version) = %v, %v; want a token", res, err)
	}
}
