package pgsimba

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// TestRetryable: a deadlock victim, a serialization failure (a pool whose
// default isolation is repeatable read or serializable, ADR 0171) and a
// connection the server ended while idle are run again; Simba's own
// SQLSTATEs and anything else are not.
func TestRetryable(t *testing.T) {
	for code, want := range map[string]bool{"40P01": true, "40001": true, "57P05": true, "SX001": false, "SX002": false, "55P03": false, "57014": false} {
		if got := retryable(fmt.Errorf("call: %w", &pgconn.PgError{Code: code})); got != want {
			t.Errorf("retryable(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
}
