#!/usr/bin/env bash
# Starts, stops or reports the servers Simba's tests need, and writes
# .services/env with the variables the tests read. Each server has a script
# in scripts/services/ defining <name>_start, <name>_stop and <name>_status;
# start is idempotent (it starts only what is not running) and installs
# what is missing from the operating system's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=$ROOT/.services
mkdir -p "$STATE"
cmd=${1:-start}
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
SERVICES=(${SIMBA_SERVICES:-postgres mariadb redis zookeeper docker})
for s in "${SERVICES[@]}"; do
  if declare -F "${s}_$cmd" >/dev/null; then "${s}_$cmd"; fi
done
if [ "$cmd" = start ]; then mv "$STATE/env.new" "$STATE/env"; echo "services: ready (${SERVICES[*]}); variables in .services/env"; else rm -f "$STATE/env.new"; fi
