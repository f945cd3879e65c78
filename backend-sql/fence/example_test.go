package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/fence"
	"github.com/simba-go/simba/term"
)

// A leader guards its write with its term's token, in the write's own
// transaction. If it was paused after EnsureValid and a later term has
// written meanwhile, the guard refuses and the write never happens.
func ExampleTable_GuardPgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	fences, err := fence.New("billing", fence.Postgres)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fences.CreatePgx(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	var t *term.Term // from an election's OnElected
	if t == nil || t.EnsureValid(time.Second) != nil {
		return // not the leader (in this example, never)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := fences.GuardPgx(ctx, tx, t.Name(), t.Token()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE invoices SET state = 'sent' WHERE id = $1", 42)
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		fmt.Println("a later leader has written; this one stepped aside")
	}
}

func ExampleTable_CreateSQL() {
	fences, err := fence.New("billing", fence.Postgres)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fences.CreateSQL())
	// Output: CREATE TABLE IF NOT EXISTS billing_fence (name text PRIMARY KEY, token bigint NOT NULL)
}

// The same guard on database/sql, here on MySQL/MariaDB.
func ExampleTable_Guard() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	fences, err := fence.New("billing", fence.MySQL)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fences.Create(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	var t *term.Term // from an election's OnElected
	if t == nil {
		return
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Rollback()
	if err := fences.Guard(ctx, tx, t.Name(), t.Token()); err != nil {
		fmt.Println(err) // errors.Is(err, fence.ErrStale): a later term has written
		return
	}
	if _, err := tx.ExecContext(ctx, "UPDATE invoices SET state = 'sent' WHERE id = ?", 42); err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println(err)
	}
}
