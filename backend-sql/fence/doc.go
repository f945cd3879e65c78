// Package fence guards a user's own writes with a term's fencing token, in
// the user's own transaction (docs/design.md §6).
//
// A node paused right after checking its term can still write after the
// term ended and another node won the next one. The resource stops it: a
// fencing [Table] remembers, per lease name, the highest token that wrote,
// and refuses a lower one. Put the guard in the same transaction as the
// write it protects:
//
//	tx := begin()
//	if err := fences.GuardPgx(ctx, tx, t.Name(), t.Token()); err != nil {
//		tx.Rollback(ctx) // errors.Is(err, fence.ErrStale): a later term wrote
//		return err
//	}
//	... the write ...
//	tx.Commit(ctx)
//
// The guard upserts the name's row and keeps its lock until the
// transaction ends, so a concurrent writer with a lower token waits and is
// then refused, and one with a higher token waits for this transaction and
// then wins. The same token may write any number of times.
//
// [Table.GuardPgx] takes a pgx transaction ([pgx.Tx]); [Table.Guard] takes
// a database/sql transaction on PostgreSQL (pgx's stdlib) or MySQL/MariaDB.
// The table lives in the user's database next to the data it guards, not
// necessarily where Simba's sessions live.
package fence
