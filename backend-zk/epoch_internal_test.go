package zksimba

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestEpochTokens(t *testing.T) {
	const created = int64(1_767_225_600_123) // ms; second 1767225600
	initEp, err := newEpoch("/r", epochRecord{Epoch: "0123456789abcdef"}, &zk.Stat{Czxid: 0x500000010, Ctime: created})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := newEpoch("/r", epochRecord{Epoch: "0123456789abcdef", QuarantineMS: 400}, &zk.Stat{Czxid: 0x100000002, Ctime: created + 5000})
	if err != nil {
		t.Fatal(err)
	}
	if initEp.start != 1767225600 || initEp.until != 0 {
		t.Fatalf("Init epoch of before ADR 0179: start %d, until %d", initEp.start, initEp.until)
	}
	// An Init epoch now records 1 ms: it starts past its creation second
	// (above every token of an epoch lost in that second) and grants
	// nothing before it.
	newInit, err := newEpoch("/r", epochRecord{Epoch: "0123456789abcdef", QuarantineMS: initQuarantineMS}, &zk.Stat{Czxid: 0x500000010, Ctime: created})
	if err != nil {
		t.Fatal(err)
	}
	if newInit.start != 1767225601 || newInit.until != 1767225601000 {
		t.Fatalf("Init epoch: start %d, until %d; want 1767225601 and its first ms", newInit.start, newInit.until)
	}
	if lostSameSecond, err := initEp.token(&zk.Stat{Czxid: 0x500000010 + 1<<31, Ctime: created + 800}); err != nil || lostSameSecond >= newInit.start<<32 {
		t.Fatalf("a token of an epoch lost in the Init's second %d, %v; want below %d", lostSameSecond, err, newInit.start<<32)
	}
	// After a loss: start past the creation second, and the quarantine at
	// least to that second (400 ms alone would end before it).
	if lost.start != 1767225606 || lost.until != 1767225606000 {
		t.Fatalf("lost epoch: start %d, until %d; want 1767225606, its second", lost.start, lost.until)
	}
	tok := func(e *epoch, czxid, ctime int64) (uint64, error) {
		return e.token(&zk.Stat{Czxid: czxid, Ctime: ctime})
	}
	a, err := tok(initEp, 0x500000011, created+1)
	if err != nil || a != 1767225600<<32+1 {
		t.Fatalf("first token = %d, %v", a, err)
	}
	if initEp.of(0x500000011) != a {
		t.Fatal("of disagrees with token")
	}
	// Zxids restarted low after the rebuild: still higher.
	b, err := tok(lost, 0x100000003, lost.until)
	if err != nil || b <= a {
		t.Fatalf("token after the loss = %d, %v; want > %d", b, err, a)
	}
	// Every token of the Init epoch whose high part kept within the clock
	// is below every token of the lost one.
	last, err := tok(initEp, 0x500000010+4<<32, created+4500)
	if err != nil || last >= b {
		t.Fatalf("last token before the loss %d, %v; want < %d", last, err, b)
	}
	// The next loss comes 2 s after Init, and the server that creates the
	// new epoch has a clock 3 s behind the one that created the first (a
	// rebuilt ensemble, or a leader change between skewed servers): less
	// than the quarantine. Every token of the new epoch must still be
	// higher than the old epoch's: it starts at the second its quarantine
	// ends, which is ADR 0138's assumption.
	const behind, quarantine = 3_000, 30_000 // ms
	skewed, err := newEpoch("/r", epochRecord{Epoch: "0123456789abcdef", QuarantineMS: quarantine}, &zk.Stat{Czxid: 0x100000002, Ctime: created + 2000 - behind})
	if err != nil {
		t.Fatal(err)
	}
	before, err := tok(initEp, 0x500000010+7, created+1500)
	if err != nil {
		t.Fatal(err)
	}
	if after, err := tok(skewed, 0x100000003, skewed.until); err != nil || after <= before {
		t.Fatalf("first token after a loss %d, %v; want > %d, a token of the epoch before, whose server's clock was %dms ahead (quarantine %dms)", after, err, before, behind, quarantine)
	}
	if end := created + 2000 - behind + quarantine; skewed.until != end {
		t.Fatalf("quarantine until %d: want %d, one quarantine after the creation", skewed.until, end)
	}
	if _, err := newEpoch("/r", epochRecord{Epoch: "x", QuarantineMS: 1 << 62}, &zk.Stat{Czxid: 1, Ctime: created}); err == nil {
		t.Fatal("a quarantine of 2^62 ms accepted (it would overflow the server time)")
	}
	// More leader elections than seconds: refused, not wrapped.
	if _, err := tok(initEp, 0x500000010+3<<32, created+2000); !errors.Is(err, ErrTokenOverflow) {
		t.Fatalf("token ahead of the clock: %v, want ErrTokenOverflow", err)
	}
	// A node from before the epoch is no token.
	if _, err := tok(initEp, 0x500000010, created); !errors.Is(err, ErrTokenRegressed) {
		t.Fatalf("node of the epoch's own zxid: %v, want ErrTokenRegressed", err)
	}
	if lost.quarantined(lost.until-1) != time.Millisecond || lost.quarantined(lost.until) != 0 || initEp.quarantined(0) != 0 {
		t.Fatal("quarantine boundaries")
	}
	if _, err := newEpoch("/r", epochRecord{Epoch: "x", QuarantineMS: -1}, &zk.Stat{Czxid: 1, Ctime: 1}); err == nil {
		t.Fatal("negative quarantine accepted")
	}
	if _, err := newEpoch("/r", epochRecord{Epoch: "x"}, &zk.Stat{Czxid: 1, Ctime: 1 << 62}); err == nil {
		t.Fatal("a start past 2^32 seconds accepted")
	}
}
