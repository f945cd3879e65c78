package main

import (
	"os"
	"regexp"
	"testing"
)

// `go run github.com/simba-go/simba/simbatest/cmd/simba-image@vX`, the fix
// every offline failure of simbatest prints, refuses a module whose go.mod
// has replace (or exclude) lines: "The go.mod file for the module
// providing named packages contains one or more replace directives". So
// simbatest's go.mod has none; go.work builds the siblings from disk in
// development (as cmd/simba, ADR 0197).
func TestModuleRunnableAtAVersion(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^\s*(replace|exclude)\b.*$`).Find(b); m != nil {
		t.Fatalf("simbatest/go.mod has %q: `go run …/simbatest/cmd/simba-image@vX` would refuse the module", m)
	}
}
