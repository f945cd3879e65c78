package main

import (
	"strconv"
	"strings"
	"testing"
)

// checkLeader runs `simba leader name` and checks it names identity with
// token, or exits 1 when identity is "" (nobody holds it).
func checkLeader(t *testing.T, url, name, identity string, token uint64) {
	t.Helper()
	r := simba(t, url, "leader", name)
	if identity == "" {
		if r.code != 1 {
			t.Fatalf("leader %s: code %d, stdout %q, stderr %q; want 1 (nobody)", name, r.code, r.stdout, r.stderr)
		}
		return
	}
	if r.code != 0 || !strings.HasPrefix(r.stdout, identity+" token="+strconv.FormatUint(token, 10)+" ") {
		t.Fatalf("leader %s: code %d, stdout %q, stderr %q; want %s with token %d", name, r.code, r.stdout, r.stderr, identity, token)
	}
}
