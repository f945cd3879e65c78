package pgsimba_test

import (
	"testing"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
)

// TestEngineFailures runs a real session.Session on PostgreSQL while
// connections are killed (pg_terminate_backend), a renewal is stalled on a
// row lock, and the (private) server is stopped and started.
func TestEngineFailures(t *testing.T) { sqltest.RunEngine(t, engine(t)) }
