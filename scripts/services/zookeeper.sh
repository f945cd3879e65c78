# ZooKeeper: Debian's `zookeeper` package, run by us (not systemd) as
#   - a standalone server on 127.0.0.1:2181 (SIMBA_ZK_SERVERS), and
#   - a three-node ensemble on 127.0.0.1:2191-2193 (SIMBA_ZK_ENSEMBLE),
#     quorum ports 2891-2893, election ports 3891-3893.
# Data, configs, logs and pid files live under .services/zk-*.
#
# tickTime is 200 ms so that minSessionTimeout (2 ticks) is 400 ms and the
# backend-zk expiry tests stay fast; maxSessionTimeout is raised to 20 s so the
# default 15 s lease is granted as asked. SIMBA_ZK_CLASSPATH lets tests start
# private servers (for kill/pause tests) with the same jars.
ZK_CLASSPATH=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
ZK_TICK=200

# zk_ruok PORT: true if a server answers imok on 127.0.0.1:PORT.
zk_ruok() {
  local out
  out=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf ruok >&3 && timeout 2 cat <&3) 2>/dev/null) || return 1
  [ "$out" = imok ]
}

# zk_mode PORT: prints standalone, leader or follower (empty if not serving).
zk_mode() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null | sed -n 's/^Mode: //p'
}

# zk_check_conf PORT: fails unless the server on PORT runs with our tick and
# session bounds (the tests rely on them), e.g. a system ZooKeeper on 2181.
zk_check_conf() {
  local conf
  conf=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf conf >&3 && timeout 2 cat <&3) 2>/dev/null) || true
  if ! grep -qx "tickTime=$ZK_TICK" <<<"$conf" || ! grep -qx "maxSessionTimeout=20000" <<<"$conf"; then
    echo "services: the ZooKeeper on 127.0.0.1:$1 is not ours (want tickTime=$ZK_TICK, maxSessionTimeout=20000); stop it and run again" >&2
    return 1
  fi
}

# zk_write_conf DIR CLIENTPORT [ensemble]: writes DIR/zoo.cfg.
zk_write_conf() {
  local dir=$1 port=$2
  mkdir -p "$dir/data"
  cat > "$dir/zoo.cfg" <<EOF
tickTime=$ZK_TICK
initLimit=50
syncLimit=10
minSessionTimeout=$((2 * ZK_TICK))
maxSessionTimeout=20000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
# Every renewal is a transaction: keep the logs small and purge old ones.
preAllocSize=4096
snapCount=10000
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
  if [ "${3:-}" = ensemble ]; then
    cat >> "$dir/zoo.cfg" <<EOF
standaloneEnabled=false
server.1=127.0.0.1:2891:3891
server.2=127.0.0.1:2892:3892
server.3=127.0.0.1:2893:3893
EOF
  fi
}

# zk_launch DIR PORT: starts the server configured in DIR unless PORT answers.
zk_launch() {
  local dir=$1 port=$2
  if zk_ruok "$port"; then return 0; fi
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then return 0; fi
  (
    cd "$dir"
    # setsid: the server outlives the shell (and process group) that started it.
    setsid nohup java -Xmx256m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false \
      -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
      > "$dir/server.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
  )
}

# zk_wait PORT SECONDS WANT: waits until PORT answers and reports a mode in WANT.
zk_wait() {
  local port=$1 secs=$2 want=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    if zk_ruok "$port" && [[ " $want " == *" $(zk_mode "$port") "* ]]; then return 0; fi
    sleep 0.1
  done
  echo "services: zookeeper on 127.0.0.1:$port not serving ($want) after ${secs}s" >&2
  return 1
}

zookeeper_start() {
  if [ ! -d /usr/share/zookeeper ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
  fi
  local d i p
  d=$STATE/zk-standalone
  if ! zk_ruok 2181; then
    zk_write_conf "$d" 2181
    zk_launch "$d" 2181
  fi
  for i in 1 2 3; do
    d=$STATE/zk-ens$i
    if ! zk_ruok $((2190 + i)); then
      zk_write_conf "$d" $((2190 + i)) ensemble
      echo "$i" > "$d/data/myid"
      zk_launch "$d" $((2190 + i))
    fi
  done
  zk_wait 2181 60 standalone
  for i in 1 2 3; do zk_wait $((2190 + i)) 90 "leader follower"; done
  for p in 2181 2191 2192 2193; do zk_check_conf $p; done
  setenv SIMBA_ZK_SERVERS "127.0.0.1:2181"
  setenv SIMBA_ZK_ENSEMBLE "127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193"
  setenv SIMBA_ZK_CLASSPATH "$ZK_CLASSPATH"
}

zookeeper_stop() {
  local d
  for d in "$STATE"/zk-standalone "$STATE"/zk-ens1 "$STATE"/zk-ens2 "$STATE"/zk-ens3; do
    if [ -f "$d/pid" ]; then kill "$(cat "$d/pid")" 2>/dev/null || true; rm -f "$d/pid"; fi
  done
}

zookeeper_status() {
  local p
  for p in 2181 2191 2192 2193; do echo "zookeeper 127.0.0.1:$p: $(zk_mode $p || true)"; done
}
