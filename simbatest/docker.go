package simbatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Errors name what to do: each failure a new user meets (no Docker, no
// registry, no reaper image) says how to get past it.

// ImageCommand builds the local image that SIMBA_TEST_IMAGE names, from
// anywhere (it needs Docker and Debian's package mirror, not Docker Hub).
const ImageCommand = "go run github.com/simba-go/simba/simbatest/cmd/simba-image@latest"

// LocalImage is the name ImageCommand and scripts/services/docker.sh give
// the image.
const LocalImage = "simba-servers:bookworm-2"

// ryukImage is the reaper image of the testcontainers-go version in
// go.mod (its internal config.ReaperDefaultImage).
const ryukImage = "testcontainers/ryuk:0.14.0"

// RyukEnv is testcontainers' switch for its reaper (Ryuk).
const RyukEnv = "TESTCONTAINERS_RYUK_DISABLED"

// sweep is the command that removes the containers a killed run left.
const sweep = "docker rm -f $(docker ps -aq --filter label=" + Label + "=1)"

// reaper is the process's decision about testcontainers' reaper: made
// once, before the first testcontainers call, because testcontainers
// reads its configuration (TESTCONTAINERS_RYUK_DISABLED) once per process.
var reaper struct {
	once sync.Once
	note string // what was decided and why, logged by the first test
}

// decideReaper disables Ryuk, through its variable, when it cannot work:
// the local image is in use (an offline setup: Ryuk's image is not in
// it), or Ryuk's image is neither present nor pullable. Containers are
// removed by each test's cleanup either way; Ryuk only adds the removal of
// a killed run's, which the label sweep also does. A variable set by the
// user is left alone.
func decideReaper(c config) string {
	if v, set := os.LookupEnv(RyukEnv); set {
		return fmt.Sprintf("simbatest: %s=%s (yours): left as is", RyukEnv, v)
	}
	disable := func(why string) string {
		_ = os.Setenv(RyukEnv, "true")
		return fmt.Sprintf("simbatest: Ryuk (testcontainers' reaper) disabled: %s. Each test removes its containers; a killed run's: %s", why, sweep)
	}
	if c.flavour == debian {
		return disable(fmt.Sprintf("the local image %s is in use, and Ryuk's image %s is not pulled for it", c.image, ryukImage))
	}
	img := ryukImage
	if p := os.Getenv("TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX"); p != "" {
		img = path.Join(p, ryukImage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := engine(ctx)
	if cli == nil {
		return "" // no engine to ask: the provider's error will say so
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.ImageInspect(ctx, img); err == nil {
		return ""
	}
	r, err := cli.ImagePull(ctx, img, client.ImagePullOptions{})
	if err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return disable(fmt.Sprintf("its image %s cannot be pulled (%v)", img, err))
	}
	return ""
}

// engine is Docker's own client to the engine testcontainers will most
// likely use (testcontainers' own client would read its configuration
// now, before the decision): DOCKER_HOST, else the default socket, else
// the usual rootless and Desktop sockets. Nil if none answers.
func engine(ctx context.Context) *client.Client {
	hosts := []string{""} // "": client.FromEnv alone (DOCKER_HOST or the default socket)
	if _, set := os.LookupEnv("DOCKER_HOST"); !set {
		home, _ := os.UserHomeDir()
		for _, p := range []string{
			path.Join(os.Getenv("XDG_RUNTIME_DIR"), "docker.sock"),
			path.Join(home, ".docker", "run", "docker.sock"),
			path.Join(home, ".docker", "desktop", "docker.sock"),
			fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()),
		} {
			if _, err := os.Stat(p); err == nil {
				hosts = append(hosts, "unix://"+p)
			}
		}
	}
	for _, h := range hosts {
		opts := []client.Opt{client.FromEnv}
		if h != "" {
			opts = append(opts, client.WithHost(h))
		}
		cli, err := client.New(opts...)
		if err != nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cli.Ping(pctx, client.PingOptions{})
		cancel()
		if err == nil {
			return cli
		}
		_ = cli.Close()
	}
	return nil
}

// reach is the process's check of DOCKER_HOST, made once.
var reach struct {
	once sync.Once
	err  error
}

// hostCheckTimeout bounds the check of DOCKER_HOST: an engine that takes
// the connection and never answers (frozen, behind a dead tunnel) must
// fail the test, not hang it.
const hostCheckTimeout = 15 * time.Second

// checkDockerHost asks the engine DOCKER_HOST names for a ping, within
// hostCheckTimeout. testcontainers' own check of the host (NewDockerProvider)
// has no deadline. Nil when DOCKER_HOST is unset, or when the user's
// ~/.testcontainers.properties names the host (tc.host comes first there).
func checkDockerHost() error {
	host, set := os.LookupEnv("DOCKER_HOST")
	if !set || host == "" || tcHostConfigured() {
		return nil
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), hostCheckTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer to a ping within %v: %w", hostCheckTimeout, err)
		}
		return err
	}
	return nil
}

// tcHostConfigured reports whether ~/.testcontainers.properties sets
// tc.host, which testcontainers prefers to DOCKER_HOST.
func tcHostConfigured() bool {
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	b, err := os.ReadFile(path.Join(home, ".testcontainers.properties"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, _, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(k) == "tc.host" {
			return true
		}
	}
	return false
}

// provider returns the Docker provider, having decided about Ryuk, or
// fails the test saying what to do.
func provider(t testing.TB, c config) *testcontainers.DockerProvider {
	t.Helper()
	first := false
	reaper.once.Do(func() { reaper.note, first = decideReaper(c), true })
	if first && reaper.note != "" {
		t.Log(reaper.note)
	}
	reach.once.Do(func() { reach.err = checkDockerHost() })
	if reach.err != nil {
		t.Fatal(noDocker(reach.err))
	}
	// DefaultNetwork("bridge") stops the provider from creating its own
	// bridge network (reaper_default, on a private range) when the engine
	// has none: host networking needs no network at all. It is the only
	// switch v0.44 has for this; deprecated without a replacement yet.
	//lint:ignore SA1019 no other way to keep testcontainers from creating a bridge network
	p, err := testcontainers.NewDockerProvider(testcontainers.DefaultNetwork("bridge"), testcontainers.WithLogger(tclog.TestLogger(t)))
	if err != nil {
		t.Fatal(noDocker(err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := p.Client().Ping(ctx, client.PingOptions{}); err != nil {
		_ = p.Close()
		t.Fatal(noDocker(err))
	}
	return p
}

// noDocker is the error of an engine that cannot be found or reached.
func noDocker(err error) string {
	host, set := os.LookupEnv("DOCKER_HOST")
	where := "DOCKER_HOST is not set, and no engine was found at the usual sockets"
	if set {
		where = fmt.Sprintf("DOCKER_HOST=%q", host)
	}
	return fmt.Sprintf("simbatest: no Docker engine answers (%s): %v\n"+
		"simbatest runs every server in a container. Fix: start Docker (or Podman's Docker socket) "+
		"and, if its socket is not the default one, set DOCKER_HOST to it (e.g. DOCKER_HOST=unix:///run/user/$UID/docker.sock). "+
		"Unit tests that need no server: simbatest.Memory(t).", where, err)
}

// startFailed is the error of a container that could not be started:
// with the hint for a missing image (offline, or no access to Docker Hub)
// or a reaper that could not start.
func startFailed(c config, err error, hadImage bool) string {
	msg := fmt.Sprintf("simbatest: starting %s: %v", c.image, err)
	switch {
	case strings.Contains(err.Error(), "reaper"):
		msg += fmt.Sprintf("\nFix: testcontainers' reaper (Ryuk, image %s) could not start: set %s=true "+
			"(simbatest removes its containers itself; after a killed run: %s).", ryukImage, RyukEnv, sweep)
	case !hadImage && c.flavour == debian:
		msg += fmt.Sprintf("\nFix: the image %s is not in this Docker engine: build it once with\n\t%s\n"+
			"(it needs Docker and Debian's package mirror, not Docker Hub), or unset %s to use the official images.", c.image, ImageCommand, ImageEnv)
	case !hadImage:
		msg += fmt.Sprintf("\nFix: %s could not be pulled (offline, or no access to its registry?). Either build the one local image "+
			"holding every server, once:\n\t%s\nand set %s=%s; or pull %s from a mirror and pass simbatest.WithImage(\"<mirror>/%s\").",
			c.image, ImageCommand, ImageEnv, LocalImage, c.image, c.image)
	}
	return msg
}

// hasImage reports whether the engine has image already (so a failure to
// start is not a failed pull).
func hasImage(p *testcontainers.DockerProvider, image string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := p.Client().ImageInspect(ctx, image)
	return err == nil || !cerrdefs.IsNotFound(err) && !errors.Is(err, context.DeadlineExceeded)
}
