#!/usr/bin/env bash
# Starts, stops or reports the servers Simba's tests need, and writes
# .services/env with the variables the tests read. Each server has a script
# in scripts/services/ defining <name>_start, <name>_stop and <name>_status;
# start is idempotent (it starts only what is not running) and installs
# what is missing from the operating system's packages.
#
# Two kinds of servers (docs/adr/0066-test-servers-per-checkout.md):
#   - machine-wide ones (PostgreSQL 5432, MariaDB 3306, Redis 6379, the Redis
#     Cluster 7001-7003, ZooKeeper 2181 and 2191-2193, the docker engine):
#     the first checkout to need them starts them, the others reuse them, and
#     `stop` stops only what this checkout started;
#   - the private SQL servers that failure tests stop and start: one pair
#     per checkout, on ports derived from the checkout's path (or
#     SIMBA_SERVICES_SLOT), with their data under $PRIVATE, a directory the
#     postgres and mysql users can reach wherever the checkout lives (a home
#     directory or a `mktemp -d` is closed to them).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=$ROOT/.services
mkdir -p "$STATE"
cmd=${1:-start}
CHECKOUT_ID=$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)
# SLOT (0-499) offsets the private servers' ports.
SLOT=${SIMBA_SERVICES_SLOT:-$((CHECKOUT_ID % 500))}
if ! [[ $SLOT =~ ^[0-9]+$ ]] || [ "$SLOT" -ge 500 ]; then
  echo "services: SIMBA_SERVICES_SLOT=$SLOT: want a number from 0 to 499" >&2
  exit 2
fi
PRIVATE=/var/tmp/simba-$CHECKOUT_ID
# private_dir: creates $PRIVATE, refusing one that someone else made (it is
# in a world-writable directory, and we run as root).
private_dir() {
  if [ -e "$PRIVATE" ] || [ -L "$PRIVATE" ]; then
    if [ -L "$PRIVATE" ] || [ ! -d "$PRIVATE" ] || [ ! -O "$PRIVATE" ]; then
      echo "services: $PRIVATE exists but is not a directory of $(id -un); remove it and run again" >&2
      return 1
    fi
  else
    mkdir -m 755 "$PRIVATE"
  fi
  printf '%s\n' "$ROOT" > "$PRIVATE/checkout"
  ln -sfn "$PRIVATE" "$STATE/private"
}
# owner_of DATADIR: the checkout a private server's data directory belongs to.
owner_of() { cat "$(dirname "$(dirname "$1")")/checkout" 2>/dev/null || echo "a checkout that predates per-checkout ports"; }
: > "$STATE/env.new"
# setenv NAME VALUE: record a variable for the tests.
setenv() { echo "export $1='$2'" >> "$STATE/env.new"; }
# wait_port PORT SECONDS: wait until something listens on 127.0.0.1:PORT.
wait_port() {
  local port=$1 secs=${2:-30} i
  for ((i = 0; i < secs * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "services: nothing listens on 127.0.0.1:$port after ${secs}s" >&2
  return 1
}
for f in scripts/services/*.sh; do . "$f"; done
# SIMBA_SERVICES_EXTRA adds optional servers.
SERVICES=(${SIMBA_SERVICES:-postgres mariadb redis zookeeper etcd docker chromium} ${SIMBA_SERVICES_EXTRA:-})
for s in "${SERVICES[@]}"; do
  if declare -F "${s}_$cmd" >/dev/null; then "${s}_$cmd"; fi
done
if [ "$cmd" = start ]; then mv "$STATE/env.new" "$STATE/env"; echo "services: ready (${SERVICES[*]}); variables in .services/env"; else rm -f "$STATE/env.new"; fi
