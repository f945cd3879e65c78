package pgsimba_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend-sql/internal/sqltest"
	"github.com/simba-go/simba/backend-sql/pgsimba"
)

// startBouncer starts a private PgBouncer in transaction pooling mode in
// front of the test server (four server connections), stopped when t
// ends, and returns its URL. It fails, naming what is missing, without
// SIMBA_PGBOUNCER (Debian's package pgbouncer, installed by make services).
func startBouncer(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SIMBA_PGBOUNCER")
	if bin == "" {
		t.Fatal("SIMBA_PGBOUNCER is not set: the transaction-pooling rows of the matrix need PgBouncer (run `make services`, which installs Debian's pgbouncer, and source .services/env)")
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("SIMBA_PGBOUNCER=%s: %v (apt-get install pgbouncer)", bin, err)
	}
	u, err := url.Parse(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// Not t.TempDir(), whose parent only this user may enter: PgBouncer
	// may run as postgres (below).
	dir, err := os.MkdirTemp("", "simba-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pw := ""
	if p, ok := u.User.Password(); ok {
		pw = " password=" + p
	}
	db := strings.TrimPrefix(u.Path, "/")
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = %s/pgbouncer.log
`, db, u.Hostname(), u.Port(), db, u.User.Username(), pw, port, dir, dir)
	for name, text := range map[string]string{"pgb.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", u.User.Username())} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgb.ini"))
	if me, err := user.Current(); err == nil && me.Uid == "0" {
		// PgBouncer refuses to run as root.
		if err := os.Chmod(dir, 0o777); err != nil { // its log goes there
			t.Fatal(err)
		}
		cmd = exec.Command("runuser", "-u", "postgres", "--", bin, filepath.Join(dir, "pgb.ini"))
	}
	// Its own process group, so that the cleanup ends runuser's child too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	bu := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", u.User.Username(), port, db)
	for i := 0; ; i++ {
		c, err := pgx.Connect(ctxT(t), bu+"&default_query_exec_mode=simple_protocol")
		if err == nil {
			_ = c.Close(context.Background())
			return bu
		}
		if i == 100 {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer on port %d: %v; its log:\n%s", port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPgBouncerTransactionPooling: through PgBouncer in transaction
// pooling mode (no session state kept between transactions, no prepared
// statements) calls work and exclusion holds, with pgx's exec and
// simple_protocol query modes (docs/deployment/sql.md), also when the
// server connections behind it differ in default isolation (a session
// SET left by another client): each call judges its own transaction.
func TestPgBouncerTransactionPooling(t *testing.T) {
	bu := startBouncer(t)
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			u := bu + "&default_query_exec_mode=" + mode
			// Leave two of the four server connections serializable and
			// repeatable read: a SET in a transaction outlives it, and
			// transaction pooling never resets the connection.
			leak := newPool(t, u, nil)
			var txs []pgx.Tx
			for _, level := range []string{"serializable", "repeatable read", "read committed", "read committed"} {
				tx, err := leak.Begin(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctxT(t), "SET SESSION default_transaction_isolation = '"+level+"'"); err != nil {
					t.Fatal(err)
				}
				txs = append(txs, tx)
			}
			for _, tx := range txs {
				if err := tx.Commit(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			leak.Close()
			prefix := sqltest.FreshPrefix()
			a := newBackend(t, newPool(t, u, nil), prefix)
			b, err := pgsimba.New(ctxT(t), newPool(t, u, nil), pgsimba.WithNamespace(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			exclusive(t, a, b, "x")
			sqltest.ConcurrentCalls(t, a)
		})
	}
}
