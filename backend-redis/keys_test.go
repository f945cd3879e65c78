package redissimba

import (
	"errors"
	"strings"
	"testing"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

func TestValidateNamespace(t *testing.T) {
	cases := []struct {
		ns string
		ok bool
	}{
		{"billing", true},
		{"a", true},
		{"A-b_c.9", true},
		{strings.Repeat("n", 64), true},
		{"", false},
		{strings.Repeat("n", 65), false},
		{"a{b", false},
		{"a}b", false},
		{"a:b", false},
		{"a b", false},
		{"a*b", false},
		{"é", false},
		{"a\x00", false},
	}
	for _, c := range cases {
		err := ValidateNamespace(c.ns)
		if c.ok && err != nil {
			t.Errorf("ValidateNamespace(%q) = %v, want nil", c.ns, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalidNamespace) {
			t.Errorf("ValidateNamespace(%q) = %v, want ErrInvalidNamespace", c.ns, err)
		}
	}
}

func FuzzValidateNamespace(f *testing.F) {
	for _, s := range []string{"billing", "", "a{b}", "a:b", strings.Repeat("x", 65), "a b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ns string) {
		if ValidateNamespace(ns) != nil {
			return
		}
		// A valid namespace yields keys with exactly one hash tag, the
		// namespace itself, and no separator inside it.
		k := newKeys(ns)
		if strings.Count(k.session, "{") != 1 || strings.Count(k.session, "}") != 1 {
			t.Fatalf("namespace %q gives key %q with more than one hash tag", ns, k.session)
		}
		tag := k.prefix[strings.Index(k.prefix, "{")+1 : strings.Index(k.prefix, "}")]
		if tag != ns || strings.ContainsAny(ns, ": \r\n") || len(ns) > MaxNamespaceLen {
			t.Fatalf("namespace %q: tag %q", ns, tag)
		}
	})
}

func FuzzParseNotice(f *testing.F) {
	for _, s := range []string{"x", "a b c", "", "  ", "bad/name ok", "..", "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		names := parseNotice(payload)
		fields := strings.Fields(payload)
		if len(names) > len(fields) {
			t.Fatalf("%d names from %d fields", len(names), len(fields))
		}
		for _, n := range names {
			if err := deadline.ValidateName(n); err != nil {
				t.Fatalf("parseNotice(%q) kept invalid %q: %v", payload, n, err)
			}
			if !strings.Contains(payload, n) {
				t.Fatalf("parseNotice(%q) invented %q", payload, n)
			}
		}
	})
}

func FuzzParseRenew(f *testing.F) {
	f.Add(int64(1500), "3", "#v", "3", "x", "17", true)
	f.Add(int64(-2), "0", "a", "", "b", "x", false)
	f.Fuzz(func(t *testing.T, ttl int64, v, k1, v1, k2, v2 string, full bool) {
		res := []any{ttl, v}
		if full {
			res = append(res, []any{k1, v1, k2, v2})
		}
		rep, err := parseRenew(res)
		if err != nil {
			return
		}
		if rep.Version == 0 || rep.Remaining < 0 || rep.Full != full {
			t.Fatalf("parseRenew(%v) = %+v", res, rep)
		}
		for _, l := range rep.Leases {
			if l.Token == 0 || strings.HasPrefix(l.Name, "#") {
				t.Fatalf("parseRenew(%v) kept lease %+v", res, l)
			}
		}
	})
}

func TestValidID(t *testing.T) {
	for id, want := range map[driver.ID]bool{
		"0123456789abcdef0123456789abcdef":  true,
		"0123456789ABCDEF0123456789abcdef":  false,
		"0123456789abcdef0123456789abcde":   false,
		"0123456789abcdef0123456789abcdef0": false,
		"0123456789abcdef0123456789abcde}":  false,
		"":                                  false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}

// redisErr is an answer of the server, as go-redis reports one.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// Only the server refusing FCALL or FUNCTION LOAD itself turns the acquire
// function off; an error from inside the function (which may have
// written) never makes the backend run the call again as the script.
func TestRefusesFunctions(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{redisErr("ERR unknown command 'FCALL', with args beginning with: 'simba_acquire_x' '4' "), true},   // Redis 7 syntax, e.g. a proxy
		{redisErr("ERR unknown command `FCALL`, with args beginning with: `simba_acquire_x`, `4`, "), true}, // Redis 6.2
		{redisErr("ERR unknown command 'FUNCTION'"), true},
		{redisErr("NOPERM this user has no permissions to run the 'fcall' command"), true},
		{redisErr("NOPERM this user has no permissions to run the 'function|load' command"), true},
		{redisErr("NOPERM this user has no permissions to run the 'zadd' command script: a, on @user_function:42."), false},
		{redisErr("ERR unknown command 'BOGUS' script: a, on @user_function:42."), false},
		{redisErr("ERR Function not found"), false},
		{redisErr("LOADING Redis is loading the dataset in memory"), false},
		{redisErr("SIMBA_NO_RUN_ID INFO server shows no run_id"), false},
		{errors.New("dial tcp: connection refused 'fcall'"), false}, // not an answer of the server
	} {
		if got := refusesFunctions(c.err); got != c.want {
			t.Errorf("refusesFunctions(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
