package etcdsimba_test

import (
	"os/exec"
	"testing"
	"time"

	etcdsimba "github.com/simba-go/simba/backend-etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAuthThroughTheUsersClient runs a session through a client that
// authenticates as a user whose role may only read and write the
// namespace's prefix: the backend needs nothing more (Status included),
// and a client without credentials is refused with the server's error.
func TestAuthThroughTheUsersClient(t *testing.T) {
	c := startPrivate(t, 1)
	ns := newNamespace(t)
	ep := c.endpoint(0)
	for _, args := range [][]string{
		{"user", "add", "root:rootpw"},
		{"role", "add", "simba"},
		{"role", "grant-permission", "simba", "--prefix=true", "readwrite", ns + "/@simba/"},
		{"user", "add", "app:apppw"},
		{"user", "grant-role", "app", "simba"},
		{"auth", "enable"},
	} {
		if out, err := exec.Command("etcdctl", append([]string{"--endpoints", ep, "--user", "root:rootpw"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("etcdctl %v: %v\n%s", args, err, out)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zapNop, Username: "app", Password: "apppw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	b := newBackend(t, cli, ns, etcdsimba.WithMaxLease(2*time.Second))
	s := openOn(t, b, 2*time.Second)
	tok := s.mustAcquire("x")
	if _, err := s.renew(5 * time.Second); err != nil {
		t.Fatalf("Renew as a user with the prefix only: %v", err)
	}
	s.release("x", tok)

	anon := newClient(t, c.endpoints())
	if err := newBackendNoInit(t, anon, ns).Init(ctxT(t, 5*time.Second)); err == nil {
		t.Fatalf("Init without credentials on a server with auth: nil, want the server's refusal")
	} else {
		t.Logf("without credentials: %v", err)
	}
}
