package simbatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// Label marks every container simbatest starts, for a sweep after a killed
// run: docker ps -aq --filter label=org.simba-go.simbatest=1; the label
// Label+".pid" names the test process, so a sweep can spare the
// containers of a run still going.
const Label = "org.simba-go.simbatest"

// ImageEnv names the variable that, when set, makes every container run
// that image, which must hold Debian's packages of all five servers.
const ImageEnv = "SIMBA_TEST_IMAGE"

// ErrNotReady is returned (wrapped) when a server does not answer in time.
var ErrNotReady = errors.New("simbatest: server not ready")

// flavour says how a server is started inside an image: the official
// images' conventions, or Debian's packages.
type flavour int

const (
	official flavour = iota
	debian
)

// Option configures a server.
type Option func(*config)

type config struct {
	image     string
	flavour   flavour
	version   string
	cluster   bool
	namespace string
	timeout   time.Duration
}

// WithImage runs the server from image, which follows the official image's
// conventions (a mirror or a derived image).
func WithImage(image string) Option {
	return func(c *config) { c.image, c.flavour = image, official }
}

// WithDebianImage runs the server from image, which holds Debian's package
// of the server (as the image built by scripts/services/docker.sh does).
func WithDebianImage(image string) Option {
	return func(c *config) { c.image, c.flavour = image, debian }
}

// WithVersion picks the official image's tag (default: see each server).
func WithVersion(tag string) Option { return func(c *config) { c.version = tag } }

// WithCluster starts three nodes: a three-master Redis Cluster, a
// three-node ZooKeeper ensemble, or a three-member etcd cluster.
// PostgreSQL and MySQL refuse it.
func WithCluster() Option { return func(c *config) { c.cluster = true } }

// WithNamespace sets the Simba namespace (Redis key prefix, SQL table
// prefix, ZooKeeper root, etcd key prefix /simbatest/<ns>) of the returned
// backends; default: one per test.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithStartTimeout bounds how long a server may take to become ready
// (default 120s: a JVM or a database initialising on a loaded CI machine).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

func newConfig(t testing.TB, officialImage, defaultTag string, opts []Option) config {
	c := config{timeout: 120 * time.Second}
	if img := os.Getenv(ImageEnv); img != "" {
		c.image, c.flavour = img, debian
	}
	for _, o := range opts {
		o(&c)
	}
	if c.image == "" {
		tag := c.version
		if tag == "" {
			tag = defaultTag
		}
		c.image = officialImage + ":" + tag
	}
	if c.namespace == "" {
		c.namespace = fmt.Sprintf("st%d", rand.Uint32N(1_000_000_000))
	}
	return c
}

// nodes is how many servers to start: three for a cluster or ensemble.
func (c config) nodes() int {
	if c.cluster {
		return 3
	}
	return 1
}

// Node is one server container.
type Node struct {
	// Addr is the server's client address, 127.0.0.1:port.
	Addr string
	// Container is the running container, for faults (Stop, Start, Exec).
	Container testcontainers.Container

	ready func(context.Context) error
	wait  time.Duration
}

// Port is the node's client port.
func (n *Node) Port() int {
	_, p, _ := net.SplitHostPort(n.Addr)
	port, _ := strconv.Atoi(p)
	return port
}

// Stop stops the server's container (SIGTERM, then SIGKILL after timeout);
// its data stays in the container for Start.
func (n *Node) Stop(ctx context.Context, timeout time.Duration) error {
	return n.Container.Stop(ctx, &timeout)
}

// Start starts a stopped node again on the same port with the same data
// and waits until it serves.
func (n *Node) Start(ctx context.Context) error {
	if err := n.Container.Start(ctx); err != nil {
		return err
	}
	return waitReady(ctx, n)
}

// Kill kills the server at once (SIGKILL, no shutdown); Start brings it
// back.
func (n *Node) Kill(ctx context.Context) error {
	zero := time.Duration(0)
	return n.Container.Stop(ctx, &zero)
}

// Exec runs cmd in the node's container and returns its combined output;
// a non-zero exit status is an error.
func (n *Node) Exec(ctx context.Context, cmd ...string) (string, error) {
	// Multiplexed: the output without the Docker stream's 8-byte frame
	// headers, which would otherwise garble every line read from it (the
	// fault harness's reshard read its node ids through them).
	code, r, err := n.Container.Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return "", err
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		return string(out), fmt.Errorf("simbatest: %s exited %d: %s", strings.Join(cmd, " "), code, out)
	}
	return string(out), nil
}

// ports hands out loopback ports: the process-wide set keeps two servers
// started in parallel by one test binary from choosing the same port before
// either binds it (a listen check alone cannot see a port chosen but not
// yet bound).
var ports struct {
	sync.Mutex
	given map[int]bool
}

// freePorts returns n distinct free ports outside the ephemeral range (so
// no outgoing connection's local port can take one meanwhile) and outside
// the ports the project's own servers use.
func freePorts(n int) ([]int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10_000 {
			return nil, errors.New("simbatest: no free loopback port in 20000-29999")
		}
		p := 20000 + rand.IntN(10_000)
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports.given[p] = true
		out = append(out, p)
	}
	return out, nil
}

// spec is one container to run.
type spec struct {
	cmd   []string
	env   map[string]string
	entry []string // nil: the image's own entrypoint
}

// run starts a container from c.image with host networking and registers
// its removal with the test; the caller waits for it (mustReady), so that
// the nodes of an ensemble all start before any is expected to serve.
func run(t testing.TB, c config, s spec, addr string, ready func(context.Context) error) *Node {
	t.Helper()
	ctx := context.Background()
	p := provider(t, c)
	had := hasImage(p, c.image)
	req := testcontainers.ContainerRequest{
		Image:      c.image,
		Cmd:        s.cmd,
		Env:        s.env,
		Entrypoint: s.entry,
		Labels:     map[string]string{Label: "1", Label + ".pid": strconv.Itoa(os.Getpid())},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
		},
	}
	ctr, err := p.RunContainer(ctx, req)
	if ctr != nil {
		t.Cleanup(func() {
			if err := testcontainers.TerminateContainer(ctr); err != nil {
				t.Errorf("simbatest: removing %s: %v", c.image, err)
			}
		})
	}
	if err != nil {
		t.Fatal(startFailed(c, err, had))
	}
	return &Node{Addr: addr, Container: ctr, ready: ready, wait: c.timeout}
}

// mustReady waits for every node to serve, failing the test otherwise.
func mustReady(t testing.TB, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		if err := waitReady(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

// waitReady polls the node's readiness check until it passes or the start
// timeout elapses; the error carries the container's last log lines.
func waitReady(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, n.wait)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = n.ready(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s after %v: %v\n%s", ErrNotReady, n.Addr, n.wait, last, tail(n.Container))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the container's last log lines, for a failure message.
func tail(c testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
