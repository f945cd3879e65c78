package pgsimba

import (
	"strings"
	"testing"
)

func TestServerSettingsWarnings(t *testing.T) {
	for _, c := range []struct {
		s    serverSettings
		want []string // a word of each warning, in order
	}{
		{serverSettings{fsync: "on"}, nil},
		{serverSettings{fsync: "off"}, []string{"fsync is off"}},
		{serverSettings{fsync: "on", standbys: 2}, []string{"2 standby(s) replicating asynchronously"}},
		{serverSettings{fsync: "on", standbys: 1, syncStandbys: "ANY 1 (a, b)"}, nil},
		{serverSettings{fsync: "off", standbys: 1}, []string{"fsync is off", "1 standby(s)"}},
	} {
		got := c.s.warnings()
		if len(got) != len(c.want) {
			t.Errorf("%+v: warnings %q, want %d", c.s, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%+v: warning %d = %q, want it to say %q", c.s, i, got[i], w)
			}
		}
	}
}
