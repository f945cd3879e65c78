#!/usr/bin/env bash
# Runs every Fuzz target of every module for FUZZTIME (default 10s) each.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-10s}
for m in deadline term session election lock group backend-sql backend-redis backend-zk fxsimba otelsimba cmd/simba integration; do
  (cd "$m" && for pkg in $(go list ./...); do
    for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
      echo "== $pkg $f"
      go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
    done
  done)
done
