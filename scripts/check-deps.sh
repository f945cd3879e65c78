#!/usr/bin/env bash
# Checks the dependency rules of docs/adr/0001-workspace.md: deadline uses
# the standard library only, and no core module imports a backend, fx or
# OpenTelemetry.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
nonstd=$(cd deadline && go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./... | grep -v '^github.com/simba-go/simba/deadline' || true)
if [ -n "$nonstd" ]; then echo "deadline depends on more than the standard library: $nonstd"; fail=1; fi
for m in deadline term internal session election lock group; do
  bad=$(cd $m && go list -deps ./... | grep -E 'simba/backend-|go.uber.org/fx|go.opentelemetry.io|redis|pgx|go-sql-driver|zookeeper|go.etcd.io' || true)
  if [ -n "$bad" ]; then echo "core module $m imports: $bad"; fail=1; fi
done
# benchpeers (the peer benchmark) is a leaf: its peers' dependencies must
# never reach a library module.
users=$(grep -l 'simba/benchpeers' */go.mod | grep -v '^benchpeers/' || true)
if [ -n "$users" ]; then echo "benchpeers is required by: $users"; fail=1; fi
exit $fail
