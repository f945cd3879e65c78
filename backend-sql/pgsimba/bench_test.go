package pgsimba_test

import (
	"context"
	"testing"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/session/driver"
)

func bench(b *testing.B) sqltest.Bench {
	url := pgURL(b)
	pool := newPool(b, url, nil)
	h := sqltest.Harness{
		NewCounted: func(t testing.TB, w *sqltest.WireCounter) driver.Backend {
			return newBackend(t, newPool(t, url+"&pool_max_conns=1", w), "")
		},
	}
	var schemaMade = map[string]bool{}
	return sqltest.Bench{
		Harness: h,
		NewClient: func(b *testing.B, prefix string) driver.Backend {
			if prefix == "" {
				prefix = sqltest.FreshPrefix()
			}
			if schemaMade[prefix] {
				be, err := newBackendNoDrop(b, pool, prefix)
				if err != nil {
					b.Fatal(err)
				}
				return be
			}
			schemaMade[prefix] = true
			return newBackend(b, pool, prefix)
		},
		Raw: func(b *testing.B) (func(context.Context, string, string, int64) error, func(context.Context, string) error) {
			tbl := sqltest.FreshPrefix() + "_raw"
			if _, err := pool.Exec(sqltest.Ctx(b), "CREATE TABLE "+tbl+" (name text PRIMARY KEY, session_id text, token bigint NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+tbl) })
			upsert := "INSERT INTO " + tbl + " (name, session_id, token) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET session_id = EXCLUDED.session_id, token = EXCLUDED.token"
			del := "DELETE FROM " + tbl + " WHERE name = $1"
			return func(ctx context.Context, name, owner string, token int64) error {
					_, err := pool.Exec(ctx, upsert, name, owner, token)
					return err
				}, func(ctx context.Context, name string) error {
					_, err := pool.Exec(ctx, del, name)
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

// BenchmarkHandover: Stop on the leader → OnElected on the candidate, woken
// by LISTEN/NOTIFY.
func BenchmarkHandover(b *testing.B) { sqltest.RunHandover(b, bench(b)) }

// BenchmarkHandoverBackend: A releases → B's LISTEN notice → B's Acquire,
// without the engine.
func BenchmarkHandoverBackend(b *testing.B) {
	sqltest.RunHandoverBackend(b, bench(b), func(be driver.Backend, fn func(driver.Notice)) func() {
		stop, err := be.(driver.Broadcaster).Subscribe(fn)
		if err != nil {
			b.Fatal(err)
		}
		return stop
	}, 0)
}

// BenchmarkNamesEverUsed: acquire + release of a new name after 1, 10⁴
// and 10⁶ distinct names were used (issue 23), with the namespace's rows
// and pg_total_relation_size before and after them (and after VACUUM).
func BenchmarkNamesEverUsed(b *testing.B) {
	pool := newPool(b, pgURL(b), nil)
	sqltest.RunNamesEverUsed(b, bench(b), func(b *testing.B, prefix string, vacuum bool) (rows, bytes int64) {
		tables := []string{prefix + "_sessions", prefix + "_leases", prefix + "_marks", prefix + "_epoch", prefix + "_schema"}
		for _, t := range tables {
			if vacuum {
				if _, err := pool.Exec(sqltest.Ctx(b), "VACUUM "+t); err != nil {
					b.Fatal(err)
				}
			}
			var n, size int64
			// t is a fresh valid prefix and a fixed suffix.
			if err := pool.QueryRow(sqltest.Ctx(b), "SELECT count(*), pg_total_relation_size('"+t+"') FROM "+t).Scan(&n, &size); err != nil {
				b.Fatal(err)
			}
			rows, bytes = rows+n, bytes+size
		}
		return rows, bytes
	})
}
