package simbatest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	zksimba "github.com/simba-go/simba/backend-zk"
)

// ZooKeeperServer is a running ZooKeeper, standalone or a three-node
// ensemble.
type ZooKeeperServer struct {
	Nodes []*Node
	// Backend is a Simba backend (it owns its ZooKeeper client) under the
	// root /simbatest/<namespace>, which ZooKeeper initialised
	// (zksimba.Backend.ForceInit): a new namespace, so its first use is not
	// quarantined.
	Backend   *zksimba.Backend
	Namespace string
}

// Servers are the nodes' client addresses.
func (s *ZooKeeperServer) Servers() []string { return addrs(s.Nodes) }

// Root is the backends' root znode.
func (s *ZooKeeperServer) Root() string { return "/simbatest/" + s.Namespace }

// NewBackend returns another backend under the same root with its own
// ZooKeeper session: another process of the application under test. The
// root is already initialised; to test a namespace's loss, delete the
// root (the next Open quarantines it for one MaxLease).
func (s *ZooKeeperServer) NewBackend(t testing.TB, opts ...zksimba.Option) *zksimba.Backend {
	t.Helper()
	b, err := zksimba.New(s.Servers(), s.Root(), opts...)
	if err != nil {
		t.Fatalf("simbatest: zookeeper backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

// Leader returns the ensemble's current leader (the only node of a
// standalone server), or nil if none answers as leader.
func (s *ZooKeeperServer) Leader(ctx context.Context) *Node {
	for _, n := range s.Nodes {
		if m := zkMode(ctx, n.Addr); m == "leader" || m == "standalone" {
			return n
		}
	}
	return nil
}

// zkScript writes the configuration ($1 client port, $2 myid, $3 the
// server.N lines separated by spaces) and runs the server in the
// foreground: with the official image's zkServer.sh, or with Debian's jars.
// tickTime 200 ms lets a test ask for a 400 ms session; maxSessionTimeout
// 20 s grants Simba's default 15 s lease.
const zkScript = `set -e
if command -v zkServer.sh >/dev/null; then cfg=${ZOO_CONF_DIR:-/conf}/zoo.cfg; else cfg=/tmp/zk/zoo.cfg; fi
mkdir -p /tmp/zk/data "$(dirname "$cfg")"
cat > "$cfg" <<EOF
tickTime=200
initLimit=50
syncLimit=10
minSessionTimeout=400
maxSessionTimeout=20000
dataDir=/tmp/zk/data
clientPort=$1
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
preAllocSize=4096
autopurge.purgeInterval=1
EOF
if [ -n "$3" ]; then echo standaloneEnabled=false >> "$cfg"; for s in $3; do echo "$s" >> "$cfg"; done; echo "$2" > /tmp/zk/data/myid; fi
if command -v zkServer.sh >/dev/null; then exec zkServer.sh start-foreground; fi
exec java -Xmx256m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"`

// ZooKeeper starts ZooKeeper (official image zookeeper:3.9, or
// SIMBA_TEST_IMAGE) and returns it ready with a backend; WithCluster starts
// a three-node ensemble instead.
func ZooKeeper(t testing.TB, opts ...Option) *ZooKeeperServer {
	t.Helper()
	c := newConfig(t, "zookeeper", "3.9", opts)
	n := c.nodes()
	ps, err := freePorts(3 * n) // client, quorum and election ports
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	if c.cluster {
		for i := range n {
			servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ps[n+i], ps[2*n+i]))
		}
	}
	s := &ZooKeeperServer{Namespace: c.namespace}
	for i := range n {
		a := addr(ps[i])
		cmd := []string{"/bin/sh", "-c", zkScript, "sh", strconv.Itoa(ps[i]), strconv.Itoa(i + 1), strings.Join(servers, " ")}
		s.Nodes = append(s.Nodes, run(t, c, spec{cmd: cmd}, a, func(ctx context.Context) error {
			switch m := zkMode(ctx, a); m {
			case "standalone", "leader", "follower":
				return nil
			default:
				return fmt.Errorf("zookeeper on %s: mode %q", a, m)
			}
		}))
	}
	mustReady(t, s.Nodes...)
	s.Backend = s.NewBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// ForceInit: the servers were started just now, and Init refuses on an
	// ensemble with no node older than MaxLease (ADR 0179); nobody used the
	// namespace before.
	if err := s.Backend.ForceInit(ctx); err != nil {
		t.Fatalf("simbatest: zookeeper: init %s: %v", s.Root(), err)
	}
	return s
}

// zkMode asks a server for its mode (the srvr four-letter word):
// standalone, leader or follower, or "" when it does not serve.
func zkMode(ctx context.Context, a string) string {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", a)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return ""
	}
	b, _ := io.ReadAll(conn)
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(l, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}
