# Docker: a private engine for the container-based tests (integration/,
# simbatest/), and one locally built image holding every server.
#
# No registry is reachable from CI, so the image is built here, once, from
# Debian's packages: debootstrap a minimal bookworm rootfs (the tarball is
# cached), install postgresql, mariadb-server, redis-server, zookeeper and
# etcd-server in a chroot, `docker import` it. One image for all servers:
# five builds would download and unpack the same base five times (see
# docs/adr/0110). The tag is the cache key (an engine that has it builds
# nothing): a change to the package list bumps it (ADR 0265).
#
# The engine is ours, not the system's: its own data root, socket and pid
# file under $DOCKER_STATE (machine-wide, so a fresh clone on the same
# machine reuses the image), no bridge, no iptables. Containers use host
# networking on loopback ports; nothing is ever sent to a private range.
#
# Exports DOCKER_HOST, SIMBA_TEST_IMAGE (the image's name, which makes
# simbatest use the Debian flavour) and TESTCONTAINERS_RYUK_DISABLED (Ryuk's
# image cannot be pulled; cleanup is t.Cleanup plus a label sweep).
DOCKER_STATE=${SIMBA_DOCKER_STATE:-/var/lib/simba-docker}
DOCKER_SOCK=$DOCKER_STATE/docker.sock
SIMBA_IMAGE=simba-servers:bookworm-2
SIMBA_IMAGE_PKGS="postgresql mariadb-server redis-server redis-tools zookeeper etcd-server procps"

docker_install() {
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq docker.io debootstrap >/dev/null
  fi
}

docker_cli() { docker -H "unix://$DOCKER_SOCK" "$@"; }

docker_running() { docker_cli version >/dev/null 2>&1; }

docker_start() {
  docker_install
  mkdir -p "$DOCKER_STATE"
  if ! docker_running; then
    # overlay2 when the kernel allows it (a container is a cheap mount),
    # vfs otherwise (every container copies the image: slower, but works).
    local driver=overlay2 i
    for driver in overlay2 vfs; do
      rm -f "$DOCKER_SOCK" "$DOCKER_STATE/dockerd.pid"
      nohup dockerd --data-root "$DOCKER_STATE/data" --exec-root "$DOCKER_STATE/exec" \
        --pidfile "$DOCKER_STATE/dockerd.pid" -H "unix://$DOCKER_SOCK" \
        --storage-driver="$driver" --iptables=false --ip6tables=false --bridge=none \
        --containerd-namespace simba --containerd-plugins-namespace simba-plugins \
        >"$DOCKER_STATE/dockerd-$driver.log" 2>&1 &
      for ((i = 0; i < 300; i++)); do docker_running && break; kill -0 $! 2>/dev/null || break; sleep 0.1; done
      docker_running && break
      kill "$!" 2>/dev/null || true; wait "$!" 2>/dev/null || true
    done
    docker_running || { echo "services: dockerd did not start; see $DOCKER_STATE/dockerd-*.log" >&2; return 1; }
  fi
  docker_image
  setenv DOCKER_HOST "unix://$DOCKER_SOCK"
  setenv SIMBA_TEST_IMAGE "$SIMBA_IMAGE"
  setenv TESTCONTAINERS_RYUK_DISABLED true
  docker_sweep
}

# docker_sweep removes the containers a killed test run left behind:
# simbatest labels each with the test process's PID; a container whose
# process is gone is removed (one of a running test, maybe another
# worktree's, is left alone).
docker_sweep() {
  local id pid
  docker_cli ps -a --filter label=org.simba-go.simbatest=1 --format '{{.ID}} {{.Label "org.simba-go.simbatest.pid"}}' |
    while read -r id pid; do
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then docker_cli rm -f "$id" >/dev/null 2>&1 || true; fi
    done
}

# docker_image: builds $SIMBA_IMAGE unless the engine already has it.
docker_image() {
  docker_cli image inspect "$SIMBA_IMAGE" >/dev/null 2>&1 && return 0
  local cache=$DOCKER_STATE/cache base root start=$SECONDS
  base=$cache/bookworm-minbase.tar
  mkdir -p "$cache"
  if [ ! -s "$base" ]; then
    echo "services: debootstrap bookworm (once per machine)"
    rm -rf "$cache/base"
    debootstrap --variant=minbase bookworm "$cache/base" >"$cache/debootstrap.log" 2>&1 || {
      tail -20 "$cache/debootstrap.log" >&2; return 1
    }
    tar -C "$cache/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$cache/base"
  fi
  echo "services: building $SIMBA_IMAGE ($SIMBA_IMAGE_PKGS)"
  root=$cache/rootfs
  rm -rf "$root"; mkdir -p "$root"
  tar -C "$root" -xf "$base"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  # No service may start inside the chroot while packages install.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  if ! chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $SIMBA_IMAGE_PKGS && apt-get clean && rm -rf /var/lib/apt/lists/*" >"$cache/chroot.log" 2>&1; then
    umount "$root/proc"; tail -20 "$cache/chroot.log" >&2; return 1
  fi
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  # The servers' packaged data (a default PostgreSQL cluster, MariaDB's
  # datadir) is not used: simbatest initialises a fresh one per container.
  tar -C "$root" -c . | docker_cli import -c 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$SIMBA_IMAGE" >/dev/null
  rm -rf "$root"
  echo "services: built $SIMBA_IMAGE in $((SECONDS - start))s"
}

docker_stop() {
  # The engine is machine-wide: other checkouts' tests and long runs (make
  # chaos) use it and their containers at the same time. A checkout's stop
  # removes only the containers of processes that are gone (what start's
  # sweep does too) and leaves the engine running; SIMBA_SERVICES_STOP_SHARED=1
  # stops the engine and every Simba container (nothing else must be running).
  docker_running || return 0
  if [ "${SIMBA_SERVICES_STOP_SHARED:-}" != 1 ]; then
    docker_sweep
    echo "services: the docker engine is shared by every checkout: left running (SIMBA_SERVICES_STOP_SHARED=1 stops it)"
    return 0
  fi
  docker_cli ps -aq --filter label=org.simba-go.simbatest=1 | xargs -r docker -H "unix://$DOCKER_SOCK" rm -f >/dev/null 2>&1 || true
  local pid
  pid=$(cat "$DOCKER_STATE/dockerd.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}

docker_status() {
  if docker_running; then
    echo "docker: running ($DOCKER_SOCK, $(docker_cli info -f '{{.Driver}}'))"
    docker_cli image inspect -f '{{.RepoTags}} {{.Size}}' "$SIMBA_IMAGE" 2>/dev/null || echo "docker: $SIMBA_IMAGE not built"
  else
    echo "docker: not running"
  fi
}
