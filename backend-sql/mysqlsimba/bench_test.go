package mysqlsimba_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/session/driver"
)

func bench(b *testing.B) sqltest.Bench {
	d := dsn(b)
	db := newDB(b, d, nil)
	h := sqltest.Harness{
		NewCounted: func(t testing.TB, w *sqltest.WireCounter) driver.Backend {
			cdb := newDB(t, d, w)
			cdb.SetMaxOpenConns(1)
			return newBackend(t, cdb, "")
		},
	}
	schemaMade := map[string]bool{}
	return sqltest.Bench{
		Harness: h,
		NewClient: func(b *testing.B, prefix string) driver.Backend {
			if prefix == "" {
				prefix = sqltest.FreshPrefix()
			}
			if schemaMade[prefix] {
				be, err := mysqlsimba.New(sqltest.Ctx(b), db, mysqlsimba.WithNamespace(prefix))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = be.Shutdown(context.Background()) })
				return be
			}
			schemaMade[prefix] = true
			return newBackend(b, db, prefix)
		},
		Raw: func(b *testing.B) (func(context.Context, string, string, int64) error, func(context.Context, string) error) {
			tbl := sqltest.FreshPrefix() + "_raw"
			if _, err := db.ExecContext(sqltest.Ctx(b), "CREATE TABLE "+tbl+` (
				name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
				session_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
				token BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+tbl) })
			upsert, err := db.PrepareContext(sqltest.Ctx(b), "INSERT INTO "+tbl+" (name, session_id, token) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE session_id = VALUES(session_id), token = VALUES(token)")
			if err != nil {
				b.Fatal(err)
			}
			del, err := db.PrepareContext(sqltest.Ctx(b), "DELETE FROM "+tbl+" WHERE name = ?")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { upsert.Close(); del.Close() })
			return func(ctx context.Context, name, owner string, token int64) error {
					_, err := upsert.ExecContext(ctx, name, owner, token)
					return err
				}, func(ctx context.Context, name string) error {
					_, err := del.ExecContext(ctx, name)
					return err
				}
		},
	}
}

// BenchmarkAcquireRelease: Simba's uncontended acquire + release next to
// the raw single-row upsert + delete, on the same server in one run.
func BenchmarkAcquireRelease(b *testing.B) { sqltest.RunAcquireRelease(b, bench(b)) }

// BenchmarkAcquireReleaseInterleaved: the same two, alternating in one
// loop; reports medians and their ratio.
func BenchmarkAcquireReleaseInterleaved(b *testing.B) {
	sqltest.RunAcquireReleaseInterleaved(b, bench(b))
}

// BenchmarkRenew: one renewal with 1, 100 and 10,000 leases.
func BenchmarkRenew(b *testing.B) { sqltest.RunRenew(b, bench(b)) }

// BenchmarkHandover: Stop on the leader → OnElected on the candidate, who
// polls (MySQL has no LISTEN/NOTIFY).
func BenchmarkHandover(b *testing.B) { sqltest.RunHandover(b, bench(b)) }

// BenchmarkHandoverBackend: A releases → B polls Acquire every 0.5 s (the
// shortest retry delay of the handover benchmark's configuration), without
// the engine.
func BenchmarkHandoverBackend(b *testing.B) {
	sqltest.RunHandoverBackend(b, bench(b), nil, 500*time.Millisecond)
}
