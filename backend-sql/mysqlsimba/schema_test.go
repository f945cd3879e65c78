package mysqlsimba_test

import (
	"context"
	"testing"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

func TestSchemaVersions(t *testing.T) {
	db := newDB(t, dsn(t), nil)
	sqltest.RunSchema(t, sqltest.Schema{
		Label: "mysqlsimba",
		New: func(t *testing.T, prefix string, create bool) (driver.Backend, error) {
			opts := []mysqlsimba.Option{mysqlsimba.WithNamespace(prefix)}
			if !create {
				opts = append(opts, mysqlsimba.WithoutSchemaCreation())
			}
			b, err := mysqlsimba.New(ctxT(t), db, opts...)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			return b, nil
		},
		InstallFirst: func(t *testing.T, prefix string) {
			stmts, err := mysqlsimba.FirstSchema(prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if _, err := db.ExecContext(ctxT(t), s); err != nil {
					t.Fatalf("installing the first schema: %v", err)
				}
			}
		},
		OpenFirst: func(t *testing.T, prefix string, id driver.ID) {
			if _, err := db.ExecContext(ctxT(t), "CALL "+prefix+"_open_v1(?, 600000000)", string(id)); err != nil {
				t.Fatalf("open_v1: %v", err)
			}
		},
		SetVersion: func(t *testing.T, prefix string, v, compat int) {
			if _, err := db.ExecContext(ctxT(t), "UPDATE "+prefix+"_schema SET version = ?, compatible_from = ?", v, compat); err != nil {
				t.Fatal(err)
			}
		},
		Drop: func(t testing.TB, prefix string) { dropSchema(t, db, prefix) },
	})
}
