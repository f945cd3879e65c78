package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A Mutation is one deliberate bug: Old, which must occur exactly once in
// File (relative to the repository root), is replaced by New.
type Mutation struct {
	Name string
	File string
	Old  string
	New  string
	// Catch is what is expected to kill it (for docs/mutation.md).
	Catch string
	// Subset puts it in the fixed subset make test runs.
	Subset bool
	// Modules overrides which modules' tests run (default: the module of
	// File and every module after it in allModules).
	Modules []string
	// Run, if set, limits the tests to those matching it (go test -run):
	// for a backend module, the tests that exercise the rule, against the
	// real servers of .services/env.
	Run string
}

func (m Mutation) check(root string) error {
	b, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return fmt.Errorf("mutation %s: %w", m.Name, err)
	}
	if n := strings.Count(string(b), m.Old); n != 1 {
		return fmt.Errorf("mutation %s: its text occurs %d times in %s, want exactly once (did a refactor move it?)", m.Name, n, m.File)
	}
	return nil
}

// apply mutates the file and returns a function restoring it.
func (m Mutation) apply(root string) (restore func() error, err error) {
	path := filepath.Join(root, m.File)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := m.check(root); err != nil {
		return nil, err
	}
	mutated := strings.Replace(string(b), m.Old, m.New, 1)
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return nil, err
	}
	return func() error { return os.WriteFile(path, b, 0o644) }, nil
}

// modules are the modules whose tests run against the mutation: its own
// and those built on it.
func (m Mutation) modules() []string {
	if len(m.Modules) > 0 {
		return m.Modules
	}
	mod := strings.SplitN(m.File, "/", 2)[0]
	for i, x := range allModules {
		if x == mod {
			return allModules[i:]
		}
	}
	return allModules
}

func printTable(w io.Writer) {
	fmt.Fprintln(w, "| # | mutation | file | what it does | expected to be caught by |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for i, m := range catalogue {
		fmt.Fprintf(w, "| %d | `%s`%s | %s | %s | %s |\n", i+1, m.Name, map[bool]string{true: " (subset)"}[m.Subset], m.File, describe(m), m.Catch)
	}
}

func describe(m Mutation) string {
	old := strings.Join(strings.Fields(m.Old), " ")
	nw := strings.Join(strings.Fields(m.New), " ")
	if nw == "" {
		nw = "(removed)"
	}
	if len(old) > 70 {
		old = old[:67] + "..."
	}
	if len(nw) > 70 {
		nw = nw[:67] + "..."
	}
	return fmt.Sprintf("`%s` → `%s`", strings.ReplaceAll(old, "|", "\\|"), strings.ReplaceAll(nw, "|", "\\|"))
}
