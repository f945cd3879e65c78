package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MariaDB driver
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/deadline"
)

const rawTable = " (name VARCHAR(200) PRIMARY KEY, session_id VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"

func postgresSetup(ctx context.Context, ns string, t targets) (*backend, error) {
	url, err := need("SIMBA_POSTGRES_URL", t.postgres)
	if err != nil {
		return nil, err
	}
	var cl closers
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	cl.add(pool.Close)
	tbl := ns + "_raw"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+rawTable); err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+tbl) })
	b, err := pgsimba.New(ctx, pool, pgsimba.WithNamespace(ns))
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = b.Shutdown(context.Background()) })
	simba, simbaH, err := simbaCases(ctx, b, deadline.Config{}, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}
	upsert := "INSERT INTO " + tbl + " (name, session_id, token) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET session_id = EXCLUDED.session_id, token = EXCLUDED.token"
	del := "DELETE FROM " + tbl + " WHERE name = $1"
	raw := func(ctx context.Context) error {
		if _, err := pool.Exec(ctx, upsert, "raw", "s", 1); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, del, "raw")
		return err
	}
	rawH, err := pgRawHandover(ctx, pool, ns, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}
	return &backend{
		title:     "PostgreSQL",
		raw:       "single-row upsert + delete, autocommit",
		pairs:     append([]pairCase{{"raw", raw}}, simba...),
		handovers: []handoverCase{simbaH, rawH},
		probe:     probeIf(t, func() *serverProbe { return pgProbe(pool) }),
		notes:     []string{"pgx v5 pool shared by every case. The raw handover is the floor of Simba's design without the engine, the routines or the session checks: A's UPDATE and pg_notify in one transaction committed without waiting for the WAL flush, B's conditional UPDATE, committed with its flush, sent when its LISTEN connection (its own, not the pool's) delivers the notification. cirello.io/pglock, the peer of the issue, is not served by the module proxy this machine reaches (403), so it is not measured here; issue 11 measured it at 1.30× the raw pair."},
		close:     cl.run,
	}, nil
}

func mariadbSetup(ctx context.Context, ns string, t targets) (*backend, error) {
	dsn, err := need("SIMBA_MYSQL_DSN", t.mysql)
	if err != nil {
		return nil, err
	}
	var cl closers
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	cl.add(func() { _ = db.Close() })
	tbl := ns + "_raw"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+rawTable); err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+tbl) })
	upsert, err := db.PrepareContext(ctx, "INSERT INTO "+tbl+" (name, session_id, token) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE session_id = VALUES(session_id), token = VALUES(token)")
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = upsert.Close() })
	del, err := db.PrepareContext(ctx, "DELETE FROM "+tbl+" WHERE name = ?")
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = del.Close() })
	b, err := mysqlsimba.New(ctx, db, mysqlsimba.WithNamespace(ns))
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = b.Shutdown(context.Background()) })
	// MariaDB has no release notice: B polls on the candidate tick
	// (RenewInterval/2 + jitter), so a short lease keeps the samples short.
	simba, simbaH, err := simbaCases(ctx, b, deadline.Config{LeaseDuration: 2 * time.Second}, &cl)
	if err != nil {
		cl.run()
		return nil, err
	}
	// The same namespace through a Notifier (ADR 0145): its grants take
	// the name's wake-up hint, and a refused Acquire waits for it.
	nb, err := mysqlsimba.NewNotifier(ctx, db, mysqlsimba.WithNamespace(ns))
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(func() { _ = nb.Shutdown(context.Background()) })
	np, closeNP, err := simbaPair(ctx, nb, "npair")
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(closeNP)
	np.name += " (Notifier)"
	nh, closeNH, err := simbaHandover(ctx, nb, "nhandover", deadline.Config{LeaseDuration: 2 * time.Second})
	if err != nil {
		cl.run()
		return nil, err
	}
	cl.add(closeNH)
	nh.name += " (Notifier)"
	raw := func(ctx context.Context) error {
		if _, err := upsert.ExecContext(ctx, "raw", "s", 1); err != nil {
			return err
		}
		_, err := del.ExecContext(ctx, "raw")
		return err
	}
	return &backend{
		title:     "MariaDB",
		raw:       "single-row upsert + delete, prepared, autocommit",
		pairs:     append([]pairCase{{"raw", raw}}, append(simba, np)...),
		handovers: []handoverCase{simbaH, nh},
		probe:     probeIf(t, func() *serverProbe { return mariadbProbe(db) }),
		notes:     []string{"go-sql-driver/mysql, one database/sql pool shared by every case; no Go peer library locks on MariaDB with leases. The handover sessions use a 2 s lease. A `mysqlsimba.Backend`'s B polls on its candidate tick (no release notice); a `mysqlsimba.Notifier`'s B waits in `GET_LOCK` on the name's wake-up hint, which A's Notifier holds from its grant until its release has committed (ADR 0145)."},
		close:     cl.run,
	}, nil
}

// pgRawHandover is the floor of Simba's handover design on PostgreSQL,
// with bare statements: the holder frees a row and notifies in one
// transaction that does not wait for its WAL flush (ADR 0034); the waiter,
// refused once, sends its conditional UPDATE (which waits for its flush) when
// its LISTEN connection delivers the notification. What Simba adds over
// it is the engine, the routines' session, epoch and quarantine checks.
func pgRawHandover(ctx context.Context, pool *pgxpool.Pool, ns string, cl *closers) (handoverCase, error) {
	tbl, channel := ns+"_rawh", ns+"_rawh"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (name text PRIMARY KEY, holder text NOT NULL, held boolean NOT NULL, token bigint NOT NULL)"); err != nil {
		return handoverCase{}, err
	}
	cl.add(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+tbl) })
	if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" VALUES ('h', '', false, 0)"); err != nil {
		return handoverCase{}, err
	}
	lc, err := pool.Acquire(ctx)
	if err != nil {
		return handoverCase{}, err
	}
	listener := lc.Hijack()
	cl.add(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
		return handoverCase{}, err
	}
	// One notification at a time is all a handover needs; the listener
	// goroutine runs until the connection closes.
	notified := make(chan struct{}, 1)
	go func() {
		for {
			if _, err := listener.WaitForNotification(context.Background()); err != nil {
				return
			}
			select {
			case notified <- struct{}{}:
			default:
			}
		}
	}()
	take := func(ctx context.Context, who string) (bool, error) {
		tag, err := pool.Exec(ctx, "UPDATE "+tbl+" SET held = true, holder = $1, token = token + 1 WHERE name = 'h' AND NOT held", who)
		return tag.RowsAffected() == 1, err
	}
	// No arguments: the simple protocol, the three statements one
	// implicit transaction and one round trip.
	free := func(who string) func() error {
		q := "SET LOCAL synchronous_commit = off; UPDATE " + tbl + " SET held = false WHERE name = 'h' AND holder = '" + who + "' AND held; SELECT pg_notify('" + channel + "', 'h')"
		return func() error {
			_, err := pool.Exec(context.Background(), q)
			return err
		}
	}
	releaseA, releaseB := free("A"), free("B")
	run := func(ctx context.Context, lead time.Duration) (time.Duration, error) {
		if ok, err := take(ctx, "A"); err != nil || !ok {
			return 0, fmt.Errorf("raw handover: A's take: %v (granted %v)", err, ok)
		}
		select { // A's own take notified nobody; an old notification goes
		case <-notified:
		default:
		}
		return handover(ctx, lead, releaseA, func(ctx context.Context) (func() error, error) {
			for {
				ok, err := take(ctx, "B")
				if err != nil {
					return nil, err
				}
				if ok {
					return releaseB, nil
				}
				select {
				case <-notified:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		})
	}
	return handoverCase{name: "raw floor (UPDATE + NOTIFY, async commit → LISTEN → UPDATE)", run: run}, nil
}
