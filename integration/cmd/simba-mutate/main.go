// Command simba-mutate is the mutation gate (make mutate): it applies each
// mutation of the catalogue (catalogue.go) to a copy of the workspace, one
// at a time, runs the core modules' tests and the seeded simulation
// against it, and fails naming every mutation that survives (all tests
// pass). A mutation whose search text does not occur exactly once fails
// too: a refactor that moves the code must move the mutation with it.
//
//	go run ./cmd/simba-mutate [-seeds N] [-only name,name] [-subset]
//
// Run it from the integration module (make mutate does). -subset runs the
// fixed subset make test uses; -list prints the catalogue; -check only
// checks that every mutation applies.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	seeds := flag.Int("seeds", 400, "simulation seeds per mutation")
	only := flag.String("only", "", "comma-separated mutation names to run (default: all)")
	subset := flag.Bool("subset", false, "run the fixed subset (make test)")
	list := flag.Bool("list", false, "print the catalogue as a Markdown table and exit")
	check := flag.Bool("check", false, "check that every mutation applies exactly once, and exit")
	baseline := flag.Bool("baseline", true, "first run the tests unmutated (make test skips it: it just ran them)")
	flag.Parse()
	if *list {
		printTable(os.Stdout)
		return
	}
	if *check {
		root, err := repoRoot()
		if err == nil {
			for _, m := range catalogue {
				if err = m.check(root); err != nil {
					break
				}
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "simba-mutate:", err)
			os.Exit(1)
		}
		fmt.Printf("%d mutations, each applies exactly once\n", len(catalogue))
		return
	}
	if err := run(*seeds, *only, *subset, *baseline); err != nil {
		fmt.Fprintln(os.Stderr, "simba-mutate:", err)
		os.Exit(1)
	}
}

func run(seeds int, only string, subset, baseline bool) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	var todo []Mutation
	for _, m := range catalogue {
		switch {
		case only != "":
			if slices.Contains(strings.Split(only, ","), m.Name) {
				todo = append(todo, m)
			}
		case subset:
			if m.Subset {
				todo = append(todo, m)
			}
		default:
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return errors.New("no mutation selected")
	}
	tmp, err := os.MkdirTemp("", "simba-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTracked(root, tmp); err != nil {
		return err
	}
	// Every mutation must apply exactly once, checked before anything runs.
	for _, m := range todo {
		if err := m.check(tmp); err != nil {
			return err
		}
	}
	if baseline {
		fmt.Printf("baseline: the unmutated workspace must pass\n")
		if out, ok := runTests(tmp, seeds, allModules, ""); !ok {
			return fmt.Errorf("the unmutated workspace fails its tests:\n%s", out)
		}
	}
	var survivors []string
	for _, m := range todo {
		start := time.Now()
		restore, err := m.apply(tmp)
		if err != nil {
			return err
		}
		out, ok := runTests(tmp, seeds, m.modules(), m.Run)
		if err := restore(); err != nil {
			return err
		}
		if !ok && buildFailed.MatchString(out) {
			// A mutation that does not compile proves nothing about the
			// tests: the catalogue entry is wrong.
			return fmt.Errorf("mutation %s does not compile:\n%s", m.Name, out)
		}
		if !ok && missingServer.MatchString(out) {
			// A backend's tests fail naming the variable of a missing
			// server: that kills nothing.
			return fmt.Errorf("mutation %s needs the test servers (./scripts/services.sh start, then . .services/env):\n%s", m.Name, missingServer.FindString(out))
		}
		if ok {
			survivors = append(survivors, m.Name)
			fmt.Printf("SURVIVED %-34s (%v)\n", m.Name, time.Since(start).Round(time.Second))
			continue
		}
		fmt.Printf("killed   %-34s by %s (%v)\n", m.Name, firstFailure(out), time.Since(start).Round(time.Second))
	}
	if len(survivors) > 0 {
		return fmt.Errorf("%d of %d mutations survived: %s (docs/mutation.md)", len(survivors), len(todo), strings.Join(survivors, ", "))
	}
	fmt.Printf("all %d mutations killed\n", len(todo))
	return nil
}

// allModules are the modules the gate tests, cheapest first: the first
// failure stops a mutation's run.
var allModules = []string{"deadline", "term", "session", "lock", "election", "group"}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTracked copies the files git tracks (and the working tree's
// changes to them) from root to dst.
func copyTracked(root, dst string) error {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("list files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runTests runs the tests of modules (the root package and its internal
// ones, not the backend conformance kit) with -failfast, stopping at the
// first module that fails. It reports the output and whether all passed.
func runTests(dir string, seeds int, modules []string, run string) (string, bool) {
	var all bytes.Buffer
	for _, m := range modules {
		args := []string{"test", "-count=1", "-failfast", "-timeout", "4m"}
		if run != "" {
			args = append(args, "-run", run)
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = filepath.Join(dir, m)
		cmd.Env = append(os.Environ(), fmt.Sprintf("SIMBA_SIM_SEEDS=%d", seeds))
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if err != nil {
			return all.String(), false
		}
	}
	return all.String(), true
}

var buildFailed = regexp.MustCompile(`\[(build|setup) failed\]`)

// missingServer is how a backend test names a server it was not given.
var missingServer = regexp.MustCompile(`SIMBA_[A-Z_]+ is not set[^\n]*`)

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)|^(panic: .*)`)

// firstFailure names the first failing test in out.
func firstFailure(out string) string {
	if m := failRE.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			if s != "" {
				return s
			}
		}
	}
	return "a failing run"
}
