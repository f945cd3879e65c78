# etcd: Debian's `etcd-server` package (3.4.x; the Go client is v3.5, which
# speaks the same v3 API), run by us (not systemd), machine-wide like Redis
# and ZooKeeper:
#   - one member on 127.0.0.1:2379 (peer port 2380): SIMBA_ETCD_ENDPOINTS,
#     for backend-etcd's tests and benchpeers (etcd's concurrency.Mutex and
#     Election against Simba);
#   - a three-member cluster on 127.0.0.1:23791-23793 (peer ports
#     23801-23803): SIMBA_ETCD_CLUSTER.
# Data, logs and pid files under /var/tmp/simba-etcd (test data, no fsync
# tuning). Fault tests never touch these: they start private members on
# ports of their own.
ETCD_DIR=/var/tmp/simba-etcd

# etcd_healthy PORT: a healthy etcd answers on 127.0.0.1:PORT.
etcd_healthy() {
  local port=${1:-2379}
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 1
  command -v etcdctl >/dev/null && ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" --command-timeout=2s endpoint health >/dev/null 2>&1
}

# etcd_member NAME CLIENT PEER CLUSTER: starts one member in the background.
etcd_member() {
  local name=$1 client=$2 peer=$3 cluster=$4
  mkdir -p "$ETCD_DIR"
  # setsid: the server outlives the shell (and process group) that started it.
  setsid nohup etcd --name "$name" --data-dir "$ETCD_DIR/$name" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --initial-cluster-token simba-cluster --log-level warn \
    > "$ETCD_DIR/$name.log" 2>&1 < /dev/null &
  echo $! > "$ETCD_DIR/$name.pid"
}

# etcd_wait PORT...: waits until every port answers healthy.
etcd_wait() {
  local port i
  for port in "$@"; do
    for ((i = 0; i < 300; i++)); do etcd_healthy "$port" && break; sleep 0.1; done
    etcd_healthy "$port" || { echo "services: etcd on 127.0.0.1:$port not healthy after 30s (logs: $ETCD_DIR/*.log)" >&2; return 1; }
  done
}

etcd_start() {
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
  fi
  if ! etcd_healthy 2379; then
    if (exec 3<>/dev/tcp/127.0.0.1/2379) 2>/dev/null; then
      echo "services: 127.0.0.1:2379 is taken by a server that is not a healthy etcd; stop it and run again" >&2
      return 1
    fi
    # The single member keeps its historical data directory and pid file.
    mkdir -p "$ETCD_DIR"
    setsid nohup etcd --name simba --data-dir "$ETCD_DIR/data" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster simba=http://127.0.0.1:2380 --log-level warn \
      > "$ETCD_DIR/etcd.log" 2>&1 < /dev/null &
    echo $! > "$ETCD_DIR/pid"
    etcd_wait 2379
  fi
  local i cluster="" need=()
  for i in 1 2 3; do cluster+="${cluster:+,}simba$i=http://127.0.0.1:$((23800 + i))"; done
  for i in 1 2 3; do
    if ! etcd_healthy $((23790 + i)); then
      if (exec 3<>"/dev/tcp/127.0.0.1/$((23790 + i))") 2>/dev/null; then
        # A member of a cluster that lost its quorum answers but is not
        # healthy: start the others.
        continue
      fi
      etcd_member "simba$i" $((23790 + i)) $((23800 + i)) "$cluster"
      need+=($((23790 + i)))
    fi
  done
  if [ ${#need[@]} -gt 0 ]; then etcd_wait 23791 23792 23793; fi
  setenv SIMBA_ETCD_ENDPOINTS "127.0.0.1:2379"
  setenv SIMBA_ETCD_CLUSTER "127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793"
}

etcd_stop() {
  local f
  for f in "$ETCD_DIR/pid" "$ETCD_DIR"/simba[123].pid; do
    if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; fi
  done
}

etcd_status() {
  local p
  for p in 2379 23791 23792 23793; do
    if etcd_healthy "$p"; then echo "etcd 127.0.0.1:$p: healthy"; else echo "etcd 127.0.0.1:$p: not running"; fi
  done
}
