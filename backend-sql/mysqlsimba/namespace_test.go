package mysqlsimba_test

import (
	"database/sql"
	"errors"
	"testing"

	sqlbackend "github.com/simba-go/simba/backend-sql"
	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/deadline"
)

// TestNamespaceRule checks the rule every backend shares (ADR 0061): a bad
// namespace is refused, before any query, with an error matching
// deadline.ErrInvalidName, through the option and its deprecated alias.
func TestNamespaceRule(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for _, o := range []mysqlsimba.Option{mysqlsimba.WithNamespace("Bad"), mysqlsimba.WithNamespace(""), mysqlsimba.WithPrefix("a-b")} {
		_, err := mysqlsimba.New(t.Context(), db, o)
		if !errors.Is(err, deadline.ErrInvalidName) || !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
			t.Errorf("New = %v, want ErrInvalidName and ErrInvalidPrefix", err)
		}
	}
	if _, err := mysqlsimba.New(t.Context(), nil); errors.Is(err, deadline.ErrInvalidName) {
		t.Errorf("New(nil db) = %v, matches ErrInvalidName", err)
	}
}
