package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo tells its story: an election, a handover in order, a failover
// at the local deadline, and a stale write refused by its fencing token.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"OnElected  scheduler#1",
		"task told to stop (STEPPED_DOWN)",
		"OnElected  scheduler#2",
		"local deadline passed",
		"OnRevoked  scheduler#2 reason DEADLINE_PASSED",
		"OnElected  scheduler#3",
		"REFUSED (token 1 < 2 already seen)",
		"settled over node-a, node-b:",
		"settled over node-a, node-b, node-c:",
		"reason STEPPED_DOWN",
		"Leave returned",
		"settled over node-b, node-c:",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	// In the handover, the old task returned before the new leader was elected.
	returned := regexp.MustCompile(`task returned`).FindStringIndex(text)
	second := strings.Index(text, "OnElected  scheduler#2")
	if returned == nil || returned[0] > second {
		t.Errorf("the new leader was elected before the old task returned:\n%s", text)
	}
}
