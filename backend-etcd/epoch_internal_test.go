package etcdsimba

import (
	"errors"
	"testing"
	"time"
)

// TestEpochToken checks the token arithmetic of ADR 0208: strictly rising
// with the revision, refused for a key from before the epoch, and refused
// when the high part would run more than clockSkew ahead of the granter's
// clock (a clock behind the epoch's creator's).
func TestEpochToken(t *testing.T) {
	now := time.Now().Unix()
	e := &epoch{rec: record{Start: uint64(now)}, rev: 100}
	var last uint64
	for rev := int64(101); rev < 105; rev++ {
		tok, err := e.token(rev, now)
		if err != nil || tok <= last || tok>>32 != uint64(now) {
			t.Fatalf("token(%d) = %d, %v; want above %d with high part %d", rev, tok, err, last, now)
		}
		if back, ok := e.createRev(tok); !ok || back != rev {
			t.Fatalf("createRev(token(%d)) = %d, %v", rev, back, ok)
		}
		last = tok
	}
	if _, err := e.token(100, now); !errors.Is(err, ErrTokenRegressed) {
		t.Errorf("token of a key from the epoch's own revision: %v, want ErrTokenRegressed", err)
	}
	if _, err := e.token(101, now-clockSkew-1); !errors.Is(err, ErrTokenOverflow) {
		t.Errorf("token whose high part is ahead of the granter's clock: %v, want ErrTokenOverflow", err)
	}
	if _, err := e.token(101, now-clockSkew); err != nil {
		t.Errorf("token one skew ahead of the granter's clock: %v, want it granted", err)
	}
	// The carry into the high part counts as seconds ahead.
	if _, err := e.token(100+3<<32, now+1); !errors.Is(err, ErrTokenOverflow) {
		t.Errorf("token with a carry of 3 s one second after the start: %v, want ErrTokenOverflow", err)
	}
	if _, ok := (&epoch{rec: record{Start: uint64(now) + 1}, rev: 100}).createRev(last); ok {
		t.Errorf("createRev of a token of an earlier epoch: ok, want false")
	}
}

func TestValidateNamespace(t *testing.T) {
	for _, ns := range []string{"/a", "/simba/my-app_1.x", "/A/b/C"} {
		if err := ValidateNamespace(ns); err != nil {
			t.Errorf("ValidateNamespace(%q) = %v, want nil", ns, err)
		}
	}
	for _, ns := range []string{"", "/", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a/@simba", "/a b", "/a\x00", "/" + string(make([]byte, MaxNamespaceLen))} {
		if err := ValidateNamespace(ns); !errors.Is(err, ErrInvalidNamespace) {
			t.Errorf("ValidateNamespace(%.30q) = %v, want ErrInvalidNamespace", ns, err)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, ep := range []string{"127.0.0.1:2379", "http://etcd:2379", "https://[::1]:2379", "unix:///run/etcd.sock", "etcd.example.com:443"} {
		if err := checkEndpoint(ep); err != nil {
			t.Errorf("checkEndpoint(%q) = %v, want nil", ep, err)
		}
	}
	for _, ep := range []string{"", "etcd", "etcd:", ":2379", "etcd:http", "etcd:70000", "ftp://etcd:21", "unix://"} {
		if err := checkEndpoint(ep); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("checkEndpoint(%q) = %v, want ErrInvalidOption", ep, err)
		}
	}
}

// TestRestoredSince checks the restore rule of ADR 0209 on readings: a
// follower with an apply backlog (non-writing entries committed but not
// applied) is no restore, nor is a member that has not applied the epoch's
// write; a raft log restarted under the same revisions is.
func TestRestoredSince(t *testing.T) {
	// The epoch was written at revision 1000, raft index 1200: gap −200.
	ep := &epoch{rec: record{Gap: -200}, rev: 1000}
	for _, c := range []struct {
		what string
		g    gauge
		want bool
	}{
		{"the leader, later", gauge{rev: 1500, applied: 1800, committed: 1800}, false},
		{"a follower 300 entries behind, 250 of them lease grants", gauge{rev: 1250, applied: 1500, committed: 1800}, false},
		{"a member that has not applied the epoch's write", gauge{rev: 900, applied: 5, committed: 5}, false},
		{"one entry applied between the two reads", gauge{rev: 1001, applied: 1200, committed: 1200}, false},
		{"restored from a snapshot with the epoch in it", gauge{rev: 1100, applied: 4, committed: 4}, true},
		{"restored, then written as much again", gauge{rev: 2200, applied: 1104, committed: 1104}, true},
	} {
		if got := c.g.restoredSince(ep); got != c.want {
			t.Errorf("%s: restoredSince = %v, want %v", c.what, got, c.want)
		}
	}
}
