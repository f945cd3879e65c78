# MariaDB: the machine's own server (127.0.0.1:3306, root without password, db test).
mariadb_start() {
  if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
    if ! command -v mariadbd >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
    fi
    # By its pid file: matched by --exec alone, the checkouts' private
    # mariadbd processes read as the shared server "already running", and
    # a crashed shared server was never started again.
    start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid --exec /usr/sbin/mariadbd
    wait_port 3306 60
  fi
  mariadb -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS test" >/dev/null
  setenv SIMBA_MYSQL_DSN "root@tcp(127.0.0.1:3306)/test"
  mariadb_restartable_start
}
mariadb_stop() { mariadb_restartable_stop; }
mariadb_status() { mariadb-admin -h 127.0.0.1 -uroot ping || true; }

# A private MariaDB on 127.0.0.1:$((53306 + SLOT)) (data in
# $PRIVATE/mariadb-restart, run as the mysql user) that backend-sql's failure
# tests stop and start, so that restarting a server never disturbs the shared
# one. The tests run "$SIMBA_MYSQL_RESTART_CTL stop" and "... start"; start
# returns once the server accepts connections again. Everything here acts on
# this checkout's server only (shutdown goes through its own socket): a server
# of another checkout on the port is reported, never stopped or used.
MARIADB_PRIVATE_PORT=$((53306 + SLOT))

# mariadb_datadir PORT: the data directory of the MariaDB on PORT, without
# the trailing slash (empty if none answers).
mariadb_datadir() {
  local d
  d=$(mariadb -h 127.0.0.1 -P "$1" -uroot --connect-timeout=2 -NBe 'SELECT @@datadir' 2>/dev/null) || true
  printf '%s' "${d%/}"
}

mariadb_restartable_start() {
  local dir=$PRIVATE/mariadb-restart port=$MARIADB_PRIVATE_PORT other
  private_dir
  other=$(mariadb_datadir "$port")
  if [ -n "$other" ] && [ "$other" != "$dir/data" ]; then
    echo "services: 127.0.0.1:$port is taken by the MariaDB of $other ($(owner_of "$other")); stop it, or give this checkout other ports with SIMBA_SERVICES_SLOT=<0-499>" >&2
    return 1
  elif [ -z "$other" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
    ! kill -0 "$(cat "$dir/pid" 2>/dev/null)" 2>/dev/null; then # ours may be starting
    echo "services: 127.0.0.1:$port is taken by something that is not this checkout's MariaDB; stop it, or give this checkout other ports with SIMBA_SERVICES_SLOT=<0-499>" >&2
    return 1
  fi
  if [ ! -d "$dir/data/mysql" ]; then
    rm -rf "$dir" && mkdir -p "$dir/data" && chown -R mysql:mysql "$dir"
    (cd "$dir" && mariadb-install-db --no-defaults --datadir="$dir/data" --user=mysql \
      --auth-root-authentication-method=normal >"$dir/install.log" 2>&1)
  fi
  cat > "$dir/ctl.sh" <<SH
#!/bin/sh
# ctl.sh stop|start: the private MariaDB of backend-sql's tests, for the
# checkout $ROOT (port $port, data $dir/data). Each returns only when the
# server is really gone, or really up (the process it started answers, not
# an older one).
cd "$dir" # a directory the mysql user can enter
up() { [ "\$(mariadb -h 127.0.0.1 -P $port -uroot --connect-timeout=2 -NBe 'SELECT @@datadir' 2>/dev/null)" = "$dir/data/" ]; }
case "\$1" in
stop)
  touch "$dir/held-down" # services.sh leaves it down while a test holds it so
  pid=\$(cat "$dir/pid" 2>/dev/null)
  mariadb-admin --socket="$dir/sock" -uroot shutdown || exit 1
  i=0; while [ -n "\$pid" ] && kill -0 "\$pid" 2>/dev/null; do
    i=\$((i+1)); [ \$i -ge 600 ] && { echo "private MariaDB did not stop" >&2; exit 1; }; sleep 0.1
  done ;;
start)
  rm -f "$dir/held-down"
  up && exit 0
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$dir/data" --user=mysql \\
    --port=$port --bind-address=127.0.0.1 --socket="$dir/sock" --pid-file="$dir/pid" \\
    --skip-log-bin --innodb-buffer-pool-size=32M >>"$dir/log" 2>&1 < /dev/null &
  pid=\$!
  i=0; until up && [ "\$(cat "$dir/pid" 2>/dev/null)" = "\$pid" ]; do
    kill -0 "\$pid" 2>/dev/null || { up && exit 0; echo "private MariaDB exited; log:" >&2; tail -20 "$dir/log" >&2; exit 1; }
    i=\$((i+1)); [ \$i -ge 600 ] && { echo "private MariaDB did not start" >&2; exit 1; }; sleep 0.1
  done ;;
*) echo "usage: \$0 stop|start" >&2; exit 2 ;;
esac
SH
  chmod 755 "$dir/ctl.sh"
  # A test holding the server down (ctl.sh stop) in the last two minutes
  # keeps it down: another `make test` starting now must not restart it.
  if [ -n "$(find "$dir/held-down" -mmin -2 2>/dev/null)" ]; then
    :
  else
    [ "$(mariadb_datadir "$port")" = "$dir/data" ] || "$dir/ctl.sh" start
    mariadb -h 127.0.0.1 -P "$port" -uroot -e "CREATE DATABASE IF NOT EXISTS test" >/dev/null
  fi
  setenv SIMBA_MYSQL_RESTART_DSN "root@tcp(127.0.0.1:$port)/test"
  setenv SIMBA_MYSQL_RESTART_CTL "$dir/ctl.sh"
}
mariadb_restartable_stop() {
  [ -S "$PRIVATE/mariadb-restart/sock" ] && mariadb-admin --socket="$PRIVATE/mariadb-restart/sock" -uroot shutdown >/dev/null 2>&1 || true
}
