package redissimba_test

import (
	"errors"
	"fmt"
	"testing"

	redissimba "github.com/simba-go/simba/backend-redis"
	"github.com/simba-go/simba/term"
)

// One check serves every backend's fencing helper: a wrapped ErrFenced
// matches term.ErrFenced, which the SQL helpers return too.
func TestErrFencedIsTermErrFenced(t *testing.T) {
	err := fmt.Errorf("set %q: %w", "k", redissimba.ErrFenced)
	if !errors.Is(err, term.ErrFenced) {
		t.Fatalf("errors.Is(%v, term.ErrFenced) = false", err)
	}
}
