package simbatest

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend-sql/mysqlsimba"
	"github.com/simba-go/simba/backend-sql/pgsimba"
)

// PostgresServer is a running PostgreSQL.
type PostgresServer struct {
	Node *Node
	// URL connects as postgres (trust) to the database postgres.
	URL  string
	Pool *pgxpool.Pool
	// Backend is a Simba backend on Pool, in the server's namespace.
	Backend   *pgsimba.Backend
	Namespace string
}

// NewBackend returns another backend in the same namespace on a new pool:
// another process of the application under test.
func (s *PostgresServer) NewBackend(t testing.TB) *pgsimba.Backend {
	t.Helper()
	_, b := s.open(t)
	return b
}

func (s *PostgresServer) open(t testing.TB) (*pgxpool.Pool, *pgsimba.Backend) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.URL)
	if err != nil {
		t.Fatalf("simbatest: postgres pool: %v", err)
	}
	b, err := pgsimba.New(context.Background(), pool, pgsimba.WithNamespace(s.Namespace))
	if err != nil {
		pool.Close()
		t.Fatalf("simbatest: postgres backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()); pool.Close() })
	return pool, b
}

// postgresDebian initialises a cluster on first start (the container keeps
// it across Stop/Start) and runs the server in the foreground as PID 1
// (setpriv execs, so docker's stop signal reaches postgres itself). A
// killed server leaves postmaster.pid behind, naming a PID that another
// process of the restarted container may hold: the container runs one
// postgres only, so the file is removed before starting.
const postgresDebian = `set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
mkdir -p /var/run/postgresql /tmp/pg && chown postgres /var/run/postgresql /tmp/pg
if [ ! -f /tmp/pg/PG_VERSION ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$bin/initdb" -D /tmp/pg -A trust -U postgres >/dev/null; fi
rm -f /tmp/pg/postmaster.pid
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D /tmp/pg -p "$1" -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300`

// Postgres starts PostgreSQL (official image postgres:16, or
// SIMBA_TEST_IMAGE) and returns it ready, with a pool and a backend.
func Postgres(t testing.TB, opts ...Option) *PostgresServer {
	t.Helper()
	c := newConfig(t, "postgres", "16", opts)
	if c.cluster {
		t.Fatal("simbatest: WithCluster is for Redis, ZooKeeper and etcd; PostgreSQL runs one server")
	}
	ps, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ps[0])
	sp := spec{
		cmd: []string{"postgres", "-p", port, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300"},
		env: map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"},
	}
	if c.flavour == debian {
		sp = spec{cmd: []string{"/bin/sh", "-c", postgresDebian, "sh", port}}
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable", port)
	n := run(t, c, sp, addr(ps[0]), func(ctx context.Context) error {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return err
		}
		defer pool.Close()
		return pool.Ping(ctx)
	})
	mustReady(t, n)
	s := &PostgresServer{Node: n, URL: url, Namespace: c.namespace}
	s.Pool, s.Backend = s.open(t)
	return s
}

// MySQLServer is a running MariaDB (MySQL protocol).
type MySQLServer struct {
	Node *Node
	// DSN connects as root (no password) to the database test.
	DSN string
	DB  *sql.DB
	// Backend is a Simba backend on DB, in the server's namespace.
	Backend   *mysqlsimba.Backend
	Namespace string
}

// NewBackend returns another backend in the same namespace on a new
// connection pool: another process of the application under test.
func (s *MySQLServer) NewBackend(t testing.TB) *mysqlsimba.Backend {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatalf("simbatest: mysql: %v", err)
	}
	b, err := mysqlsimba.New(context.Background(), db, mysqlsimba.WithNamespace(s.Namespace))
	if err != nil {
		_ = db.Close()
		t.Fatalf("simbatest: mysql backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()); _ = db.Close() })
	if s.DB == nil {
		s.DB = db
	}
	return b
}

// mariadbDebian initialises a datadir on first start (kept across
// Stop/Start) with a password-less root, and runs the server.
const mariadbDebian = `set -e
mkdir -p /run/mysqld /tmp/my && chown mysql /run/mysqld /tmp/my
if [ ! -d /tmp/my/mysql ]; then mariadb-install-db --user=mysql --datadir=/tmp/my --auth-root-authentication-method=normal --skip-test-db >/dev/null; fi
exec mariadbd --user=mysql --datadir=/tmp/my --port="$1" --bind-address=127.0.0.1 --socket=/tmp/my.sock --skip-name-resolve --innodb-flush-log-at-trx-commit=2 --max-connections=500`

// MySQL starts MariaDB (official image mariadb:11, or SIMBA_TEST_IMAGE) and
// returns it ready, with a *sql.DB on the database test and a backend.
func MySQL(t testing.TB, opts ...Option) *MySQLServer {
	t.Helper()
	c := newConfig(t, "mariadb", "11", opts)
	if c.cluster {
		t.Fatal("simbatest: WithCluster is for Redis, ZooKeeper and etcd; MySQL runs one server")
	}
	ps, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ps[0])
	sp := spec{
		cmd: []string{"mariadbd", "--port=" + port, "--bind-address=127.0.0.1", "--skip-name-resolve"},
		env: map[string]string{"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD": "1", "MARIADB_DATABASE": "test"},
	}
	if c.flavour == debian {
		sp = spec{cmd: []string{"/bin/sh", "-c", mariadbDebian, "sh", port}}
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", addr(ps[0])
	root := cfg.FormatDSN()
	cfg.DBName = "test"
	s := &MySQLServer{DSN: cfg.FormatDSN(), Namespace: c.namespace}
	// Ready: root can log in over TCP and the database test exists.
	s.Node = run(t, c, sp, addr(ps[0]), func(ctx context.Context) error {
		db, err := sql.Open("mysql", root)
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS test")
		return err
	})
	mustReady(t, s.Node)
	s.Backend = s.NewBackend(t)
	return s
}
