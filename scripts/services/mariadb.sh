# MariaDB: the machine's own server (127.0.0.1:3306, root without password, db test).
mariadb_start() {
  if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
    if ! command -v mariadbd >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
    fi
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_port 3306 60
  fi
  mariadb -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS test" >/dev/null
  setenv SIMBA_MYSQL_DSN "root@tcp(127.0.0.1:3306)/test"
}
mariadb_status() { mariadb-admin -h 127.0.0.1 -uroot ping || true; }
