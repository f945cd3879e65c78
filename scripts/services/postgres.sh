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
  postgres_restartable_start
}
postgres_stop() { postgres_restartable_stop; }
postgres_status() { pg_isready -h 127.0.0.1 -p 5432 || true; }

# A private PostgreSQL on 127.0.0.1:55432 (data in .services/pg-restart, run
# as the postgres user) that backend-sql's failure tests stop and start, so
# that restarting a server never disturbs the shared one. The tests run
# "$SIMBA_POSTGRES_RESTART_CTL stop" and "... start"; start returns once the
# server accepts connections again.
postgres_restartable_start() {
  local dir=$STATE/pg-restart bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  if [ ! -s "$dir/data/PG_VERSION" ]; then
    rm -rf "$dir" && mkdir -p "$dir/data" && chown -R postgres:postgres "$dir" && chmod 700 "$dir/data"
    runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
  fi
  cat > "$dir/ctl.sh" <<SH
#!/bin/sh
# ctl.sh stop|start: the private PostgreSQL of backend-sql's tests.
case "\$1" in
stop)
  touch "$dir/held-down" # services.sh leaves it down while a test holds it so
  exec runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop ;;
start)
  rm -f "$dir/held-down"
  pg_isready -h 127.0.0.1 -p 55432 -q && exit 0
  exec runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 start \\
  -o "-p 55432 -c listen_addresses=127.0.0.1 -k $dir" ;;
*) echo "usage: \$0 stop|start" >&2; exit 2 ;;
esac
SH
  chmod 755 "$dir/ctl.sh"
  # A test holding the server down (ctl.sh stop) in the last two minutes
  # keeps it down: another `make test` starting now must not restart it.
  if [ -n "$(find "$dir/held-down" -mmin -2 2>/dev/null)" ]; then
    :
  elif ! pg_isready -h 127.0.0.1 -p 55432 -q 2>/dev/null; then
    "$dir/ctl.sh" start >/dev/null
    wait_port 55432 60
  fi
  setenv SIMBA_POSTGRES_RESTART_URL "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
  setenv SIMBA_POSTGRES_RESTART_CTL "$dir/ctl.sh"
}
postgres_restartable_stop() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  [ -d "$STATE/pg-restart/data" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$STATE/pg-restart/data" -m fast -w stop >/dev/null 2>&1 || true
}
