package pgsimba_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/driver"
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
	b, err := pgsimba.Connect(ctx, "postgres://postgres@127.0.0.1:5432/test", pgsimba.WithNamespace("myapp"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	// Hand b to the session engine; it is a driver.Backend and a
	// driver.Broadcaster.
	var _ driver.Backend = b
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
	b, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace("billing"))
	if err != nil {
		fmt.Println(err) // errors.Is(err, sqlbackend.ErrInvalidPrefix) for a bad prefix
		return
	}
	defer func() { _ = b.Shutdown(context.Background()) }() // stops the LISTEN connection; the pool stays yours
	s, err := session.Open(ctx, b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
}

// With WithoutSchemaCreation the backend relies on the user's migration:
// it fails until the SQL from Schema has been run, then works.
func TestSchemaFromMigration(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	prefix := sqltest.FreshPrefix()
	t.Cleanup(func() { dropSchema(t, pool, prefix) })
	b, err := pgsimba.New(sqltest.Ctx(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithoutSchemaCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	if _, err := b.Open(sqltest.Ctx(t), driver.OpenRequest{LeaseDuration: time.Second}); err == nil {
		t.Fatal("Open succeeded without a schema")
	}
	ddl, err := pgsimba.Schema(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(sqltest.Ctx(t), ddl); err != nil {
		t.Fatalf("running Schema: %v", err)
	}
	if tok := sqltest.Acquire(t, b, sqltest.Open(t, b, time.Second), "m"); tok == 0 {
		t.Fatal("no token after the migration")
	}
}

// A namespace installed by an earlier release is upgraded by the first New
// without WithoutSchemaCreation; teams that run migrations themselves run
// this script instead.
func ExampleMigration() {
	script, err := pgsimba.Migration("myapp", 1) // from schema version 1
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Contains(script, "myapp_open_v2"), strings.Contains(script, "myapp_schema"), strings.Contains(script, "myapp_epoch"))
	// Output: true true true
}

// WithMaxLease caps every session's lease, and is the quarantine after the
// namespace's tables lost their rows: pgsimba.New(ctx, pool,
// pgsimba.WithMaxLease(10*time.Second)) grants at most 10s, and after a
// loss no lease for 10s. A cap under 1ms is refused before any I/O.
func ExampleWithMaxLease() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test") // connects lazily
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	_, err = pgsimba.New(ctx, pool, pgsimba.WithMaxLease(0))
	fmt.Println(err)
	// Output: pgsimba: WithMaxLease(0s): want at least 1ms
}

// WithMaxLockDelay lets an Acquire ask for a lock-delay up to d: with
// pgsimba.New(ctx, pool, pgsimba.WithMaxLockDelay(15*time.Second)), a lock
// won with lock.WithLockDelay(10*time.Second) whose holder's session
// expires stays refused until the database's clock passes the session's
// expiry + 10s. A negative maximum is refused before any I/O.
func ExampleWithMaxLockDelay() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test") // connects lazily
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	_, err = pgsimba.New(ctx, pool, pgsimba.WithMaxLockDelay(-time.Second))
	fmt.Println(err)
	// Output: pgsimba: WithMaxLockDelay(-1s): want 0 or more
}
