package zksimba

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateRoot(t *testing.T) {
	for _, tc := range []struct {
		root string
		ok   bool
	}{
		{"/simba", true},
		{"/simba/my-app_1:prod.v2", true},
		{"/a/zookeeper", true},
		{"", false},
		{"simba", false},
		{"/", false},
		{"/simba/", false},
		{"//simba", false},
		{"/simba//x", false},
		{"/simba/./x", false},
		{"/simba/..", false},
		{"/zookeeper", false},
		{"/zookeeper/quota", false},
		{"/sim ba", false},
		{"/sim\x00ba", false},
		{"/é", false},
		{"/" + strings.Repeat("a", 129), false},
		{"/" + strings.Repeat("a", 128), true},
		{strings.Repeat("/a", 17), false},
		{strings.Repeat("/a", 16), true},
		{strings.Repeat("/"+strings.Repeat("a", 100), 6), false},
	} {
		err := ValidateRoot(tc.root)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateRoot(%q) = %v, want ok=%v", tc.root, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidRoot) {
			t.Errorf("ValidateRoot(%q) = %v, want it to wrap ErrInvalidRoot", tc.root, err)
		}
	}
}

func FuzzValidateRoot(f *testing.F) {
	for _, s := range []string{"/simba", "/a/b", "/", "", "/zookeeper", "/a//b", "/a/../b", "/a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, root string) {
		if err := ValidateRoot(root); err != nil {
			if !errors.Is(err, ErrInvalidRoot) {
				t.Fatalf("error %v does not wrap ErrInvalidRoot", err)
			}
			return
		}
		// A valid root is a clean absolute path that ZooKeeper accepts and
		// that lease names can be appended to.
		if len(root) > MaxRootLen || root[0] != '/' || strings.HasSuffix(root, "/") ||
			strings.Contains(root, "//") || strings.HasPrefix(root+"/", "/zookeeper/") {
			t.Fatalf("ValidateRoot accepted %q", root)
		}
		for _, e := range strings.Split(root[1:], "/") {
			if e == "." || e == ".." || strings.ContainsFunc(e, func(r rune) bool { return !(r < 128 && elemByte(byte(r))) }) {
				t.Fatalf("ValidateRoot accepted %q with element %q", root, e)
			}
		}
		p := parents(root)
		if p[len(p)-1] != root || len(p) != strings.Count(root, "/") {
			t.Fatalf("parents(%q) = %v", root, p)
		}
	})
}

func connectResponse(timeoutMs int32, sid int64) []byte {
	b := make([]byte, 4+4+4+8+4+16+1)
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-4))
	binary.BigEndian.PutUint32(b[8:], uint32(timeoutMs))
	binary.BigEndian.PutUint64(b[12:], uint64(sid))
	binary.BigEndian.PutUint32(b[20:], 16)
	for i := range 16 {
		b[24+i] = byte(i + 1)
	}
	return b
}

func TestParseConnectResponse(t *testing.T) {
	info, ok := parseConnectResponse(connectResponse(4000, 0x0100000873150012))
	if !ok || info.timeout != 4*time.Second || info.sessionID != 0x0100000873150012 || len(info.passwd) != 16 {
		t.Fatalf("parse = %+v, %v", info, ok)
	}
	if info, ok := parseConnectResponse(connectResponse(0, 0)); !ok || info.sessionID != 0 {
		t.Fatalf("expired response = %+v, %v; want session 0", info, ok)
	}
	if _, ok := parseConnectResponse(connectResponse(4000, 1)[:19]); ok {
		t.Fatal("parsed a short response")
	}
	if _, ok := parseConnectResponse(connectResponse(-1, 1)); ok {
		t.Fatal("parsed a negative timeout")
	}
}

// sniffConn must see the connect response however the reads split it.
func TestSniffConnSplitReads(t *testing.T) {
	msg := connectResponse(2500, 42)
	for split := 1; split < len(msg); split++ {
		var got []connectInfo
		c := &sniffConn{onConnect: func(i connectInfo) { got = append(got, i) }}
		c.sniff(msg[:split])
		c.sniff(msg[split:])
		c.sniff(connectResponse(9999, 7)) // later traffic is not a connect response
		if len(got) != 1 || got[0].sessionID != 42 || got[0].timeout != 2500*time.Millisecond || !bytes.Equal(got[0].passwd, msg[24:40]) {
			t.Fatalf("split at %d: got %+v", split, got)
		}
	}
}

func FuzzParseConnectResponse(f *testing.F) {
	f.Add(connectResponse(4000, 1))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		info, ok := parseConnectResponse(b)
		if !ok {
			return
		}
		if len(b) < connectResponseLen || info.timeout < 0 || len(info.passwd) > max(len(b)-24, 0) {
			t.Fatalf("accepted %x as %+v", b, info)
		}
		// Byte by byte, sniffConn decodes the same once it has the frame
		// (or as much of it as it keeps).
		n := connectSniffLen(b)
		var got []connectInfo
		c := &sniffConn{onConnect: func(i connectInfo) { got = append(got, i) }}
		for i := range b {
			c.sniff(b[i : i+1])
		}
		if len(b) < n {
			if len(got) != 0 {
				t.Fatalf("sniffed %+v from %d bytes of a %d-byte frame", got, len(b), n)
			}
			return
		}
		want, _ := parseConnectResponse(b[:n])
		if len(got) != 1 || got[0].sessionID != want.sessionID || got[0].timeout != want.timeout || !bytes.Equal(got[0].passwd, want.passwd) {
			t.Fatalf("byte-wise sniff = %+v, want %+v", got, want)
		}
	})
}
