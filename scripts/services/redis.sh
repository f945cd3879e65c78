# Redis standalone: the machine's own server (127.0.0.1:6379).
# Redis Cluster: three masters on 127.0.0.1:7001-7003 without persistence,
# data under .services/redis-cluster/<port>, for backend-redis.
REDIS_CLUSTER_PORTS=(7001 7002 7003)

redis_install() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v redis-sentinel >/dev/null; then
    # redis-sentinel: backend-redis's failover tests run a private Sentinel
    # (its package starts no service where policy-rc.d forbids it; the
    # tests start their own on spare ports).
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools redis-sentinel >/dev/null
  fi
}

redis_start() {
  redis_install
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
    wait_port 6379 30
  fi
  setenv SIMBA_REDIS_ADDR "127.0.0.1:6379"
  setenv SIMBA_REDIS_SENTINEL_BIN "$(command -v redis-sentinel)"
  redis_cluster_start
}

# redis_cluster_healthy: every node answers and reports a complete cluster
# of exactly our three masters with all 16384 slots assigned.
redis_cluster_healthy() {
  local p info
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    info=$(redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null) || return 1
    grep -q '^cluster_state:ok' <<<"$info" || return 1
    grep -q '^cluster_slots_assigned:16384' <<<"$info" || return 1
    grep -q "^cluster_known_nodes:${#REDIS_CLUSTER_PORTS[@]}" <<<"$info" || return 1
  done
}

redis_cluster_start() {
  local dir=$STATE/redis-cluster p i addrs=()
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
  if ! redis_cluster_healthy; then
    # Not there or broken: start from scratch (the data is test data).
    redis_cluster_stop
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "services: 127.0.0.1:$p is taken by a server this checkout did not start (another checkout's Redis Cluster, not healthy?); stop it and run again" >&2
        return 1
      fi
    done
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do
      rm -rf "${dir:?}/$p"; mkdir -p "$dir/$p"
      redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --cluster-enabled yes \
        --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 5000 \
        --save "" --appendonly no --dir "$dir/$p" --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log"
    done
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do wait_port "$p" 30; done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
      cat "$dir/create.log" >&2; return 1
    }
    for ((i = 0; i < 300; i++)); do redis_cluster_healthy && break; sleep 0.1; done
    redis_cluster_healthy || { echo "services: redis cluster not ok after 30s" >&2; return 1; }
  fi
  setenv SIMBA_REDIS_CLUSTER_ADDRS "$(IFS=,; echo "${addrs[*]}")"
}

# redis_cluster_stop: shuts down the cluster nodes this checkout started
# (their pid is in our pid file); another checkout's cluster on the same
# ports is left alone.
redis_cluster_stop() {
  local dir=$STATE/redis-cluster p i pid
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    pid=$(cat "$dir/$p/redis.pid" 2>/dev/null) || continue
    [ "$(redis-cli -h 127.0.0.1 -p "$p" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')" = "$pid" ] || continue
    redis-cli -h 127.0.0.1 -p "$p" shutdown nosave >/dev/null 2>&1 || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

redis_stop() { redis_cluster_stop; }

redis_status() {
  redis-cli -h 127.0.0.1 -p 6379 ping || true
  if redis_cluster_healthy; then echo "redis cluster: ok (${REDIS_CLUSTER_PORTS[*]})"; else echo "redis cluster: not running"; fi
}
