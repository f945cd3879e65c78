package fence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/simba-go/simba/backend-sql/fence"
	"github.com/simba-go/simba/term"
)

// One check serves every backend's fencing helper: a wrapped ErrStale
// matches term.ErrFenced, which the Redis helper returns too.
func TestErrStaleIsTermErrFenced(t *testing.T) {
	err := fmt.Errorf("guard %q: %w", "jobs", fence.ErrStale)
	if !errors.Is(err, term.ErrFenced) {
		t.Fatalf("errors.Is(%v, term.ErrFenced) = false", err)
	}
}
