package simbatest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/simbatest"
)

// recorder is a testing.TB that records what a kit function says and
// stops it at the first Fatal, as a test would.
type recorder struct {
	testing.TB // nil: a method not overridden here panics, and the panic is reported
	mu         sync.Mutex
	lines      []string
	cleanups   []func()
}

func (r *recorder) add(s string) { r.mu.Lock(); r.lines = append(r.lines, s); r.mu.Unlock() }

func (r *recorder) Helper()                           {}
func (r *recorder) Name() string                      { return "TestErrorTexts" }
func (r *recorder) Log(args ...any)                   { r.add("LOG " + fmt.Sprint(args...)) }
func (r *recorder) Logf(format string, args ...any)   { r.add("LOG " + fmt.Sprintf(format, args...)) }
func (r *recorder) Error(args ...any)                 { r.add("ERROR " + fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.add("ERROR " + fmt.Sprintf(format, args...)) }
func (r *recorder) Fatal(args ...any)                 { r.add("FATAL " + fmt.Sprint(args...)); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.add("FATAL " + fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) FailNow()         { r.add("FATAL (FailNow)"); runtime.Goexit() }
func (r *recorder) Failed() bool     { return false }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

const errorsChild = "SIMBATEST_ERRORS_CHILD"

// errorsChildMain runs simbatest.Redis on a recorder in a process of its
// own (testcontainers reads DOCKER_HOST and its configuration once per
// process) and prints what it said, then the reaper variable as left.
func errorsChildMain() {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.add(fmt.Sprintf("PANIC %v", p))
			}
		}()
		simbatest.Redis(r)
		r.add("STARTED")
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	for _, l := range r.lines {
		fmt.Println(l)
	}
	fmt.Printf("%s=%s\n", simbatest.RyukEnv, os.Getenv(simbatest.RyukEnv))
	os.Exit(0)
}

// child runs the scenario with env (over a clean Docker environment) and
// returns what the kit said.
func child(t *testing.T, env ...string) string {
	t.Helper()
	// A bound on a hang: every failure must be reported well within it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "DOCKER_HOST", simbatest.ImageEnv, simbatest.RyukEnv, "TESTCONTAINERS_HOST_OVERRIDE", "DOCKER_CONTEXT", "HOME", "XDG_RUNTIME_DIR":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	home := t.TempDir() // no ~/.testcontainers.properties, no docker context
	cmd.Env = append(cmd.Env, errorsChild+"=1", "HOME="+home, "XDG_RUNTIME_DIR="+home)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return string(out)
}

func mustSay(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("the kit said:\n%s\nwant it to say %q", out, w)
		}
	}
}

// Each failure a new user meets names its fix (issue 22, item 11), found
// without Docker.
func TestErrorTextsWithoutDocker(t *testing.T) {
	t.Run("DOCKER_HOST to a missing socket", func(t *testing.T) {
		out := child(t, "DOCKER_HOST=unix:///nonexistent/simba/docker.sock")
		mustSay(t, out, "FATAL simbatest: no Docker engine answers", `DOCKER_HOST="unix:///nonexistent/simba/docker.sock"`,
			"Fix: start Docker", "set DOCKER_HOST", "simbatest.Memory(t)")
	})
	t.Run("DOCKER_HOST that accepts and never answers", func(t *testing.T) {
		// A frozen engine, a dead SSH tunnel or proxy: the connection is
		// taken, nothing comes back. testcontainers' own check of the host
		// has no deadline: it used to wait forever.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		defer func() {
			_ = l.Close()
			mu.Lock()
			for _, c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
		}()
		host := "tcp://" + l.Addr().String()
		start := time.Now()
		out := child(t, "DOCKER_HOST="+host)
		mustSay(t, out, "FATAL simbatest: no Docker engine answers", `DOCKER_HOST="`+host+`"`, "Fix: start Docker")
		if took := time.Since(start); took > time.Minute {
			t.Errorf("the kit took %v to say the engine does not answer", took)
		}
	})
	t.Run("no Docker at all", func(t *testing.T) {
		out := child(t)
		mustSay(t, out, "FATAL simbatest: no Docker engine answers", "DOCKER_HOST is not set", "Fix: start Docker")
	})
	t.Run("the local image disables Ryuk", func(t *testing.T) {
		out := child(t, "DOCKER_HOST=unix:///nonexistent/simba/docker.sock", simbatest.ImageEnv+"="+simbatest.LocalImage)
		mustSay(t, out, "LOG simbatest: Ryuk (testcontainers' reaper) disabled: the local image "+simbatest.LocalImage+" is in use",
			"docker ps -aq --filter label=org.simba-go.simbatest=1", simbatest.RyukEnv+"=true", "FATAL simbatest: no Docker engine answers")
	})
	t.Run("the user's Ryuk setting is kept", func(t *testing.T) {
		out := child(t, "DOCKER_HOST=unix:///nonexistent/simba/docker.sock", simbatest.ImageEnv+"="+simbatest.LocalImage, simbatest.RyukEnv+"=false")
		mustSay(t, out, simbatest.RyukEnv+"=false (yours): left as is", simbatest.RyukEnv+"=false\n")
	})
}

// Offline, with a Docker engine but no registry: the official image cannot
// be pulled and the kit says how to build the local one; Ryuk, whose image
// cannot be pulled either, is disabled without the user setting anything.
// Needs the project's engine (DOCKER_HOST from .services/env) and no
// registry access (as in CI).
func TestErrorTextOfflinePull(t *testing.T) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		t.Fatal("DOCKER_HOST is not set: start the test servers with docker and source .services/env (scripts/services.sh)")
	}
	out := child(t, "DOCKER_HOST="+host)
	if strings.Contains(out, "STARTED") {
		t.Skip("redis:7 was pulled: this machine reaches Docker Hub, so there is no offline failure to see")
	}
	mustSay(t, out, "LOG simbatest: Ryuk (testcontainers' reaper) disabled: its image testcontainers/ryuk:0.14.0 cannot be pulled",
		"FATAL simbatest: starting redis:7", "could not be pulled", simbatest.ImageCommand, simbatest.ImageEnv+"="+simbatest.LocalImage)
}
