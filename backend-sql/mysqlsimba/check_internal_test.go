package mysqlsimba

import (
	"strings"
	"testing"
)

func TestFlushWarnings(t *testing.T) {
	for flush, want := range map[string]string{"0": "a crash of mysqld loses", "1": "", "2": "operating system crash", "3": ""} {
		got := flushWarnings(flush)
		switch {
		case want == "" && len(got) != 0:
			t.Errorf("innodb_flush_log_at_trx_commit %s: warnings %q, want none", flush, got)
		case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
			t.Errorf("innodb_flush_log_at_trx_commit %s: warnings %q, want one saying %q", flush, got, want)
		}
	}
}
