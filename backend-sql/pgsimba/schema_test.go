package pgsimba_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestSchemaVersions(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	sqltest.RunSchema(t, sqltest.Schema{
		Label: "pgsimba",
		New: func(t *testing.T, prefix string, create bool) (driver.Backend, error) {
			opts := []pgsimba.Option{pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(time.Second)}
			if !create {
				opts = append(opts, pgsimba.WithoutSchemaCreation())
			}
			b, err := pgsimba.New(ctxT(t), pool, opts...)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b, nil
		},
		Install: func(t *testing.T, prefix string, v int) {
			ddl, err := pgsimba.SchemaAt(prefix, v)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctxT(t), ddl); err != nil {
				t.Fatalf("installing schema version %d: %v", v, err)
			}
		},
		OpenFirst: func(t *testing.T, prefix string, id driver.ID) {
			if _, err := pool.Exec(ctxT(t), "SELECT "+prefix+"_open_v1($1, 600000000)", string(id)); err != nil {
				t.Fatalf("open_v1: %v", err)
			}
		},
		AcquireFirst: func(t *testing.T, prefix string, id driver.ID, name string) uint64 {
			var tok int64
			if err := pool.QueryRow(ctxT(t), "SELECT r_token FROM "+prefix+"_acquire_v1($1, $2)", string(id), []string{name}).Scan(&tok); err != nil || tok <= 0 {
				t.Fatalf("acquire_v1: %d, %v", tok, err)
			}
			return uint64(tok)
		},
		SetVersion: func(t *testing.T, prefix string, v, compat int) {
			if _, err := pool.Exec(ctxT(t), "UPDATE "+prefix+"_schema SET version = $1, compatible_from = $2", v, compat); err != nil {
				t.Fatal(err)
			}
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, pool, prefix) },
	})
}

func TestDataLoss(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	sqltest.RunLoss(t, sqltest.Loss{
		New: func(t *testing.T, prefix string, maxLease time.Duration) driver.Backend {
			b, err := pgsimba.New(ctxT(t), pool, pgsimba.WithNamespace(prefix), pgsimba.WithMaxLease(maxLease))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b
		},
		Exec: func(t *testing.T, stmts ...string) {
			for _, s := range stmts {
				if _, err := pool.Exec(ctxT(t), s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
		},
		Drop:            func(t testing.TB, prefix string) { dropSchema(t, pool, prefix) },
		RestartIdentity: true,
		SkipQuarantine: func(t *testing.T, prefix string) {
			ddl, err := pgsimba.AcquireWithoutQuarantine(prefix)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctxT(t), ddl); err != nil {
				t.Fatalf("planting the bug: %v", err)
			}
		},
	})
}
