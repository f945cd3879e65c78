package integration_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConsumerOutsideWorkspace is what a new user does: in a module of their
// own, outside the workspace, with no replace line and no network for Simba's
// code, `go get` the election and backend-redis modules at a released version,
// build a program and run it against a real Redis. The release is made by
// scripts/release.sh in a throwaway repository holding this checkout's files
// (uncommitted changes included); git's url.<repo>.insteadOf points
// https://github.com/simba-go/simba at it, so `go` fetches the per-module tags
// (election/vX.Y.Z, ...) exactly as it would from GitHub. It then checks with
// `go list -deps` that the program pulls in no fx, OpenTelemetry, pgx, MySQL
// or ZooKeeper code.
func TestConsumerOutsideWorkspace(t *testing.T) {
	redisAddr := os.Getenv("SIMBA_REDIS_ADDR")
	if redisAddr == "" {
		t.Fatal("SIMBA_REDIS_ADDR is not set: run `make services` and `. .services/env` (the consumer program runs against a real Redis)")
	}
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "simba")
	snapshot(t, root, repo)
	version := releasedVersion(t, repo)

	run(t, repo, isolatedGit(), "scripts/release.sh", version)

	// The consumer's environment: Simba's modules only through git (GOPRIVATE:
	// no proxy, no checksum database), from the throwaway repository.
	// Third-party modules come from this machine's module download cache,
	// then the usual proxy. The checksum database is off because this test
	// must not need the network; the cache holds what go verified when it
	// filled it.
	cache := strings.TrimSpace(string(output(t, root, nil, "go", "env", "GOMODCACHE")))
	modcache := consumerModCache(t)
	proxy := strings.TrimSpace(string(output(t, root, nil, "go", "env", "GOPROXY")))
	gitconfig := filepath.Join(tmp, "gitconfig")
	writeFile(t, gitconfig, fmt.Sprintf("[url %q]\n\tinsteadOf = https://github.com/simba-go/simba\n", "file://"+repo))
	env := []string{
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY=file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download")) + "," + proxy,
		"GOPRIVATE=github.com/simba-go/*",
		"GOSUMDB=off",
		"GOMODCACHE=" + modcache,
		"GOTOOLCHAIN=local",
		// go indexes a module-cache directory once, trusting that a path
		// and version never change content; ours do between runs.
		"GODEBUG=goindex=0",
		"GIT_CONFIG_GLOBAL=" + gitconfig,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
	}

	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "integration", "cmd", "simba-hello", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(consumer, "main.go"), string(src))
	run(t, consumer, env, "go", "mod", "init", "example.com/consumer")
	run(t, consumer, env, "go", "get",
		"github.com/simba-go/simba/election@"+version,
		"github.com/simba-go/simba/backend-redis@"+version)
	gomod, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(gomod, []byte("replace")) {
		t.Fatalf("the consumer's go.mod has a replace line:\n%s", gomod)
	}
	for _, m := range []string{"election", "backend-redis"} {
		if want := "github.com/simba-go/simba/" + m + " " + version; !bytes.Contains(gomod, []byte(want)) {
			t.Fatalf("the consumer's go.mod does not require %s:\n%s", want, gomod)
		}
	}

	bin := filepath.Join(tmp, "simba-hello")
	run(t, consumer, env, "go", "build", "-o", bin, ".")
	// A namespace of its own per run (t.TempDir's base name is the same
	// every run): -init creates its epoch with the server's run_id, while a
	// reused one keeps an epoch written by another Redis process (a restart
	// of the shared server) and waits out the quarantine (ADR 0131).
	ns := fmt.Sprintf("consumer-test-%d", time.Now().UnixNano())
	out := output(t, consumer, nil, bin, "-redis", redisAddr, "-namespace", ns, "-init")
	if !bytes.Contains(out, []byte("elected leader of")) {
		t.Fatalf("simba-hello did not report its election:\n%s", out)
	}

	// Every module of every package the program links, and the modules'
	// required graph: neither may reach code the user did not ask for.
	deps := string(output(t, consumer, env, "go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "."))
	graph := string(output(t, consumer, env, "go", "list", "-m", "all"))
	for _, banned := range []string{"go.uber.org/fx", "go.opentelemetry.io/", "github.com/jackc/pgx", "github.com/go-sql-driver/mysql", "github.com/go-zookeeper/zk"} {
		for _, line := range strings.Split(deps, "\n") {
			if strings.Contains(line, banned) {
				t.Errorf("the program links %s (from %q)", banned, line)
			}
		}
		if strings.Contains(graph, banned) {
			t.Errorf("the consumer's module graph contains %s:\n%s", banned, graph)
		}
	}
	for _, want := range []string{"github.com/simba-go/simba/election github.com/simba-go/simba/election", "github.com/simba-go/simba/backend-redis github.com/simba-go/simba/backend-redis"} {
		if !strings.Contains(deps, want) {
			t.Errorf("go list -deps lacks %q:\n%s", want, deps)
		}
	}
}

// consumerModCache returns the consumer's module cache, locked for this test
// until it ends, with no Simba module in it. It is private, so the throwaway
// release never reaches the developer's cache, and at a fixed place, so the
// third-party packages compiled from it stay in the build cache across runs
// (go keys a package built without -trimpath by its directory): a fresh
// cache per run would recompile go-redis every time.
func consumerModCache(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "simba", "consumer-test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Two checkouts testing at once would otherwise serve each other their
	// own v0.1.0.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // closing releases the lock
	modcache := filepath.Join(dir, "mod")
	// The previous run's Simba modules (extracted, downloaded, and the git
	// clone go keeps of the repository) must go: the same version now names
	// other content.
	for _, stale := range []string{"github.com/simba-go", "cache/download/github.com/simba-go", "cache/vcs"} {
		if err := os.RemoveAll(filepath.Join(modcache, stale)); err != nil {
			t.Fatal(err)
		}
	}
	return modcache
}

// snapshot makes dst a fresh git repository holding root's tracked and
// untracked-but-not-ignored files as they are on disk, in one commit, so the
// test releases what the developer sees, not only what is committed.
func snapshot(t *testing.T, root, dst string) {
	t.Helper()
	list := output(t, root, nil, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for _, rel := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a plain file
		}
		copyFile(t, src, filepath.Join(dst, rel), fi.Mode().Perm())
	}
	gitEnv := isolatedGit()
	run(t, dst, gitEnv, "git", "init", "-q")
	run(t, dst, gitEnv, "git", "add", "-A")
	run(t, dst, gitEnv, "git", "commit", "-q", "-m", "snapshot of the checkout under test")
}

// isolatedGit is the environment of the test's own git commands: an identity
// for commits and tags, and none of the developer's configuration (signing
// commits or tags would stop the release).
func isolatedGit() []string {
	return []string{
		"GIT_AUTHOR_NAME=simba test", "GIT_AUTHOR_EMAIL=test@simba.invalid",
		"GIT_COMMITTER_NAME=simba test", "GIT_COMMITTER_EMAIL=test@simba.invalid",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
	}
}

// releasedVersion reads the module set's version from versions.yaml.
func releasedVersion(t *testing.T, repo string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("versions.yaml has no version line")
	return ""
}

func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs name in dir with env added to the test's environment and fails
// the test with the command's output if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	output(t, dir, env, name, args...)
}

// output is run returning the command's standard output.
func output(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}
