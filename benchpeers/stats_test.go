package main

import (
	"os"
	"testing"
	"time"
)

func TestQuantileIsTheNearestRank(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.9, 9}, {1, 10}, {0, 1}} {
		if got := quantile(d, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
}

func TestParseCommandstats(t *testing.T) {
	m := parseCommandstats("# Commandstats\r\ncmdstat_set:calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\ncmdstat_evalsha:calls=2,usec=50,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n")
	if m["set"] != (cmdstat{3, 12}) || m["evalsha"] != (cmdstat{2, 50}) || len(m) != 2 {
		t.Errorf("parsed %+v", m)
	}
}

func TestParseMonitorTellsScriptCallsApart(t *testing.T) {
	for _, c := range []struct {
		line    string
		cmd     string
		fromLua bool
	}{
		{`+1700000000.123456 [0 127.0.0.1:5555] "SET" "k" "v"` + "\r\n", "set", false},
		{`+1700000000.123456 [0 lua] "hget" "h" "f"` + "\r\n", "hget", true},
		{`+1700000000.123456 [0 unix:/tmp/r.sock] "evalsha" "abc" "0"` + "\r\n", "evalsha", false},
	} {
		cmd, lua, ok := parseMonitor(c.line)
		if !ok || cmd != c.cmd || lua != c.fromLua {
			t.Errorf("parseMonitor(%q) = %q, %v, %v; want %q, %v", c.line, cmd, lua, ok, c.cmd, c.fromLua)
		}
	}
}

func TestReplaceMarkedKeepsTheProseAround(t *testing.T) {
	f := t.TempDir() + "/s.md"
	before := "# S\n\nprose\n" + markBegin + "\nold table\n" + markEnd + "\nmore prose\n"
	if err := os.WriteFile(f, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceMarked(f, "new table\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	want := "# S\n\nprose\n" + markBegin + "\n\nnew table\n\n" + markEnd + "\nmore prose\n"
	if string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
	if err := os.WriteFile(f, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceMarked(f, "x"); err == nil {
		t.Error("a file without the markers was written")
	}
}
