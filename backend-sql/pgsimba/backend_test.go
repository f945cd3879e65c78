package pgsimba_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session"
)

// TestBackend runs the SQL tests both dialects share (see package sqltest).
func TestBackend(t *testing.T) { sqltest.Run(t, harness(t)) }

func TestSchemaAndChannelValidatePrefix(t *testing.T) {
	if _, err := pgsimba.Schema("Bad-Prefix"); err == nil {
		t.Error("Schema accepted an invalid prefix")
	}
	if c, err := pgsimba.Channel("app"); err != nil || c != "app_released" {
		t.Errorf("Channel(app) = %q, %v; want app_released", c, err)
	}
}

func ExampleConnect() {
	ctx := context.Background()
	b, err := pgsimba.Connect(ctx, "postgres://postgres@127.0.0.1:5432/test", pgsimba.WithPrefix("myapp"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Shutdown()
	// Hand b to the session engine; it is a session.Backend and a
	// session.Broadcaster.
	var _ session.Backend = b
}

func ExampleSchema() {
	ddl, err := pgsimba.Schema("myapp")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(ddl) > 0)
	// Output: true
}

func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	b, err := pgsimba.New(ctx, pool, pgsimba.WithPrefix("billing"))
	if err != nil {
		fmt.Println(err) // errors.Is(err, sqlbackend.ErrInvalidPrefix) for a bad prefix
		return
	}
	defer b.Shutdown() // stops the LISTEN connection; the pool stays yours
	s, err := session.Open(ctx, b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
}
