# PostgreSQL: the machine's own server (127.0.0.1:5432, trust auth, db test).
postgres_start() {
  if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    if ! command -v pg_ctlcluster >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
    wait_port 5432 60
  fi
  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" 2>/dev/null | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null
  setenv SIMBA_POSTGRES_URL "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
postgres_status() { pg_isready -h 127.0.0.1 -p 5432 || true; }
