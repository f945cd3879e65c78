package pgsimba_test

import (
	"context"
	"testing"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestSchemaVersions(t *testing.T) {
	pool := newPool(t, pgURL(t), nil)
	sqltest.RunSchema(t, sqltest.Schema{
		Label: "pgsimba",
		New: func(t *testing.T, prefix string, create bool) (driver.Backend, error) {
			opts := []pgsimba.Option{pgsimba.WithNamespace(prefix)}
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
		InstallFirst: func(t *testing.T, prefix string) {
			ddl, err := pgsimba.FirstSchema(prefix)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctxT(t), ddl); err != nil {
				t.Fatalf("installing the first schema: %v", err)
			}
		},
		OpenFirst: func(t *testing.T, prefix string, id driver.ID) {
			if _, err := pool.Exec(ctxT(t), "SELECT "+prefix+"_open_v1($1, 600000000)", string(id)); err != nil {
				t.Fatalf("open_v1: %v", err)
			}
		},
		SetVersion: func(t *testing.T, prefix string, v, compat int) {
			if _, err := pool.Exec(ctxT(t), "UPDATE "+prefix+"_schema SET version = $1, compatible_from = $2", v, compat); err != nil {
				t.Fatal(err)
			}
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, pool, prefix) },
	})
}
