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
  # PgBouncer for the transaction-pooling rows of the deployment matrix: the
  # tests start their own private one; the package's own service stays off.
  if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  setenv SIMBA_PGBOUNCER "$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
  postgres_restartable_start
}
postgres_stop() { postgres_restartable_stop; }
postgres_status() { pg_isready -h 127.0.0.1 -p 5432 || true; }

# A private PostgreSQL on 127.0.0.1:$((55432 + SLOT)) (data in
# $PRIVATE/pg-restart, run as the postgres user) that backend-sql's failure
# tests stop and start, so that restarting a server never disturbs the shared
# one. The tests run "$SIMBA_POSTGRES_RESTART_CTL stop" and "... start"; start
# returns once the server accepts connections again. Everything here acts on
# this checkout's server only: a server of another checkout on the port is
# reported, never stopped or used.
PG_PRIVATE_PORT=$((55432 + SLOT))

# pg_datadir PORT: the data directory of the PostgreSQL on PORT (empty if none answers).
pg_datadir() { PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -tAc 'SHOW data_directory' 2>/dev/null || true; }

postgres_restartable_start() {
  local dir=$PRIVATE/pg-restart bin other
  private_dir
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  other=$(pg_datadir "$PG_PRIVATE_PORT")
  if [ -n "$other" ] && [ "$other" != "$dir/data" ]; then
    echo "services: 127.0.0.1:$PG_PRIVATE_PORT is taken by the PostgreSQL of $other ($(owner_of "$other")); stop it, or give this checkout other ports with SIMBA_SERVICES_SLOT=<0-499>" >&2
    return 1
  elif [ -z "$other" ] && (exec 3<>"/dev/tcp/127.0.0.1/$PG_PRIVATE_PORT") 2>/dev/null &&
    ! kill -0 "$(head -1 "$dir/data/postmaster.pid" 2>/dev/null)" 2>/dev/null; then # ours may be starting
    echo "services: 127.0.0.1:$PG_PRIVATE_PORT is taken by something that is not this checkout's PostgreSQL; stop it, or give this checkout other ports with SIMBA_SERVICES_SLOT=<0-499>" >&2
    return 1
  fi
  if [ ! -s "$dir/data/PG_VERSION" ]; then
    rm -rf "$dir" && mkdir -p "$dir/data" && chown -R postgres:postgres "$dir" && chmod 700 "$dir/data"
    # From $dir: runuser keeps the working directory, which the postgres
    # user may not be allowed to enter (a checkout in a home directory).
    (cd "$dir" && runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null)
  fi
  cat > "$dir/ctl.sh" <<SH
#!/bin/sh
# ctl.sh stop|start: the private PostgreSQL of backend-sql's tests, for the
# checkout $ROOT (port $PG_PRIVATE_PORT, data $dir/data).
cd "$dir" # a directory the postgres user can enter
ours() { [ "\$(PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -p $PG_PRIVATE_PORT -U postgres -d postgres -tAc 'SHOW data_directory' 2>/dev/null)" = "$dir/data" ]; }
case "\$1" in
stop)
  touch "$dir/held-down" # services.sh leaves it down while a test holds it so
  exec runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop ;;
start)
  rm -f "$dir/held-down"
  ours && exit 0
  exec runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 start \\
  -o "-p $PG_PRIVATE_PORT -c listen_addresses=127.0.0.1 -k $dir" ;;
*) echo "usage: \$0 stop|start" >&2; exit 2 ;;
esac
SH
  chmod 755 "$dir/ctl.sh"
  # A test holding the server down (ctl.sh stop) in the last two minutes
  # keeps it down: another `make test` starting now must not restart it.
  if [ -n "$(find "$dir/held-down" -mmin -2 2>/dev/null)" ]; then
    :
  elif [ "$(pg_datadir "$PG_PRIVATE_PORT")" != "$dir/data" ]; then
    "$dir/ctl.sh" start >/dev/null
    wait_port "$PG_PRIVATE_PORT" 60
  fi
  setenv SIMBA_POSTGRES_RESTART_URL "postgres://postgres@127.0.0.1:$PG_PRIVATE_PORT/postgres?sslmode=disable"
  setenv SIMBA_POSTGRES_RESTART_CTL "$dir/ctl.sh"
}
postgres_restartable_stop() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  [ -d "$PRIVATE/pg-restart/data" ] && cd "$PRIVATE/pg-restart" && runuser -u postgres -- "$bin/pg_ctl" -D "$PRIVATE/pg-restart/data" -m fast -w stop >/dev/null 2>&1 || true
}
