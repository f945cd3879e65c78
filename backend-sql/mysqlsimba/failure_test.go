package mysqlsimba_test

import (
	"testing"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
)

// TestEngineFailures runs a real session.Session on MariaDB/MySQL while
// connections are killed (KILL), a renewal is stalled on a row lock, and
// the (private) server is stopped and started.
func TestEngineFailures(t *testing.T) { sqltest.RunEngine(t, engine(t)) }
