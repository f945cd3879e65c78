# Redis standalone: the machine's own server (127.0.0.1:6379).
# The backend-redis work adds the Cluster here.
redis_start() {
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    if ! command -v redis-server >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    fi
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
    wait_port 6379 30
  fi
  setenv SIMBA_REDIS_ADDR "127.0.0.1:6379"
}
redis_status() { redis-cli -h 127.0.0.1 -p 6379 ping || true; }
