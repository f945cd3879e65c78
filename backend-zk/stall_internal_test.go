package zksimba

import (
	"encoding/binary"
	"testing"
	"time"
)

// frameScanner must find the same frames however the stream is split.
func TestFrameScannerSplits(t *testing.T) {
	frame := func(xid int32, body int) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(4+body))
		b = binary.BigEndian.AppendUint32(b, uint32(xid))
		return append(b, make([]byte, body)...)
	}
	var stream []byte
	want := []int32{0, 7, -1, -2, 8}
	for i, x := range want {
		stream = append(stream, frame(x, 12*i)...)
	}
	stream = append(stream, 0, 0, 0, 0) // an empty frame
	for _, chunk := range []int{1, 3, 5, 64, len(stream)} {
		var f frameScanner
		var got []int32
		for b := stream; len(b) > 0; {
			k := min(chunk, len(b))
			f.scan(b[:k], func(head [4]byte, size int) {
				if size >= 4 {
					got = append(got, int32(binary.BigEndian.Uint32(head[:])))
				} else {
					got = append(got, 99)
				}
			})
			b = b[k:]
		}
		if len(got) != len(want)+1 || got[len(got)-1] != 99 {
			t.Fatalf("chunks of %d: frames %v, want %v and an empty one", chunk, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("chunks of %d: frames %v, want %v", chunk, got, want)
			}
		}
	}
}

// The stall limit is a tenth of the session timeout, doubled per stall in
// a row, never above go-zookeeper's own receive timeout.
func TestStallLimit(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		strikes int
		want    time.Duration
	}{
		{10 * time.Second, 0, time.Second},
		{3 * time.Second, 0, 300 * time.Millisecond},
		{3 * time.Second, 1, 600 * time.Millisecond},
		{3 * time.Second, 9, 2 * time.Second},
		{400 * time.Millisecond, 0, minStallLimit},
	} {
		if got := stallLimit(c.timeout, c.strikes); got != c.want {
			t.Errorf("stallLimit(%v, %d) = %v, want %v", c.timeout, c.strikes, got, c.want)
		}
	}
}
