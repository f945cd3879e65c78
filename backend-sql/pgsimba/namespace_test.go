package pgsimba_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/pgsimba"
	"github.com/simba-go/simba/deadline"
)

// TestNamespaceRule checks the rule every backend shares (ADR 0061): a bad
// namespace is refused, before any query, with an error matching
// deadline.ErrInvalidName, through the option and its deprecated alias.
func TestNamespaceRule(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, o := range []pgsimba.Option{pgsimba.WithNamespace("Bad"), pgsimba.WithNamespace(""), pgsimba.WithPrefix("a-b")} {
		_, err := pgsimba.New(t.Context(), pool, o)
		if !errors.Is(err, deadline.ErrInvalidName) || !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
			t.Errorf("New = %v, want ErrInvalidName and ErrInvalidPrefix", err)
		}
	}
	if _, err := pgsimba.New(t.Context(), nil); errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("New(nil pool) = %v, matches ErrInvalidName", err)
	}
}
