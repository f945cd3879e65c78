package group_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/simba-go/simba/group"
)

// TestOwnedTokenIsAStringInJSON: a partition's token is a string in JSON,
// read back exactly above 2^53, and a number (as v0.1.0 wrote it) still reads
// (ADR 0196).
func TestOwnedTokenIsAStringInJSON(t *testing.T) {
	const big uint64 = 7714429083785888759
	b, err := json.Marshal(group.Snapshot{Name: "g", Owned: []group.Owned{{Partition: 3, Token: big, Valid: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"token":"7714429083785888759"`) {
		t.Fatalf("group snapshot JSON %s: the token is not a string", b)
	}
	for _, in := range []string{string(b), strings.Replace(string(b), `"7714429083785888759"`, `7714429083785888759`, 1)} {
		var back group.Snapshot
		if err := json.Unmarshal([]byte(in), &back); err != nil || len(back.Owned) != 1 || back.Owned[0].Token != big || back.Owned[0].Partition != 3 || !back.Owned[0].Valid {
			t.Fatalf("read back %s: %+v, %v", in, back, err)
		}
	}
}
