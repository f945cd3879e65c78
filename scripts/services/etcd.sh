# etcd: Debian's `etcd-server` package, run by us (not systemd) as one
# member on 127.0.0.1:2379 (peer port 2380), for benchpeers only (etcd's
# concurrency.Mutex and Election against Simba; no library module uses
# etcd). Not among the default services: `make bench-peers` starts it with
# SIMBA_SERVICES_EXTRA=etcd. Machine-wide like Redis and ZooKeeper; data,
# log and pid file under /var/tmp/simba-etcd (test data, no fsync tuning).
ETCD_DIR=/var/tmp/simba-etcd

etcd_healthy() {
  (exec 3<>/dev/tcp/127.0.0.1/2379) 2>/dev/null || return 1
  command -v etcdctl >/dev/null && ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:2379 --command-timeout=2s endpoint health >/dev/null 2>&1
}

etcd_start() {
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
  fi
  if ! etcd_healthy; then
    if (exec 3<>/dev/tcp/127.0.0.1/2379) 2>/dev/null; then
      echo "services: 127.0.0.1:2379 is taken by a server that is not a healthy etcd; stop it and run again" >&2
      return 1
    fi
    mkdir -p "$ETCD_DIR"
    # setsid: the server outlives the shell (and process group) that started it.
    setsid nohup etcd --name simba --data-dir "$ETCD_DIR/data" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster simba=http://127.0.0.1:2380 --log-level warn \
      > "$ETCD_DIR/etcd.log" 2>&1 < /dev/null &
    echo $! > "$ETCD_DIR/pid"
    local i
    for ((i = 0; i < 300; i++)); do etcd_healthy && break; sleep 0.1; done
    etcd_healthy || { echo "services: etcd on 127.0.0.1:2379 not healthy after 30s (log: $ETCD_DIR/etcd.log)" >&2; return 1; }
  fi
  setenv SIMBA_ETCD_ENDPOINTS "127.0.0.1:2379"
}

etcd_stop() {
  if [ -f "$ETCD_DIR/pid" ]; then kill "$(cat "$ETCD_DIR/pid")" 2>/dev/null || true; rm -f "$ETCD_DIR/pid"; fi
}

etcd_status() {
  if etcd_healthy; then echo "etcd 127.0.0.1:2379: healthy"; else echo "etcd: not running"; fi
}
