package sqlbackend_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	sqlbackend "github.com/simba-go/simba/backend-sql"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidatePrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
		says   string // part of the error message
	}{
		{"simba", true, ""},
		{"a", true, ""},
		{"app_2", true, ""},
		{strings.Repeat("a", 32), true, ""},
		{"", false, "empty"},
		{strings.Repeat("a", 33), false, "longer than 32"},
		{"Simba", false, "starts with"},
		{"1app", false, "starts with"},
		{"_app", false, "starts with"},
		{"app-x", false, "offset 3"},
		{"app x", false, "offset 3"},
		{`a"; DROP TABLE t; --`, false, "offset 1"},
		{"appÄ", false, "offset 3"},
	} {
		err := sqlbackend.ValidatePrefix(tc.prefix)
		switch {
		case tc.ok && err != nil:
			t.Errorf("ValidatePrefix(%q) = %v, want nil", tc.prefix, err)
		case !tc.ok && !errors.Is(err, sqlbackend.ErrInvalidPrefix):
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidPrefix", tc.prefix, err)
		case !tc.ok && !strings.Contains(err.Error(), tc.says):
			t.Errorf("ValidatePrefix(%q) = %q, want it to say %q", tc.prefix, err, tc.says)
		}
	}
}

var prefixRule = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// FuzzValidatePrefix checks the validator against the rule written as a
// regular expression: whatever it accepts is safe to put into SQL.
func FuzzValidatePrefix(f *testing.F) {
	for _, s := range []string{"simba", "", "A", "a-b", "a\x00", strings.Repeat("z", 40), "a;b", "ä"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := sqlbackend.ValidatePrefix(s)
		if want := prefixRule.MatchString(s); (err == nil) != want {
			t.Fatalf("ValidatePrefix(%q) = %v, rule says valid = %v", s, err, want)
		}
		if err != nil && !errors.Is(err, sqlbackend.ErrInvalidPrefix) {
			t.Fatalf("ValidatePrefix(%q) = %v, not wrapping ErrInvalidPrefix", s, err)
		}
	})
}

func ExampleValidatePrefix() {
	fmt.Println(sqlbackend.ValidatePrefix("billing"))
	fmt.Println(sqlbackend.ValidatePrefix("Billing"))
	// Output:
	// <nil>
	// simba: invalid table prefix: "Billing" starts with 'B' (want 1 to 32 characters of [a-z0-9_] starting with a letter)
}
