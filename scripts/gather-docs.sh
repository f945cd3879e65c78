#!/usr/bin/env bash
# Builds docs/benchmarks.md, docs/spec-coverage.md and docs/deployment.md from
# the per-module fragments in docs/bench/, docs/spec-coverage/ and docs/deployment/ (each module's owner
# edits its own fragment; `make docs` gathers them).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  cat <<'HEAD'
# Benchmarks

Measured with `go test -bench` on the project's machine kind (2 cores, 24 GiB), each
Simba operation side by side with the raw backend operation in the same run, so that the
ratio means something on a noisy machine. Each section gives the exact command that
produced it; `make bench` runs them all. Where a goal of the issues is missed, the section
says by how much and why.
HEAD
  [ -f docs/bench/_summary.md ] && { echo; cat docs/bench/_summary.md; }
  for f in $(ls docs/bench/*.md | grep -v _summary.md); do
    echo
    sed 's/^# /## /; s/^## \(.\)/### \1/' "$f" | sed '1s/^### /## /'
  done
} > docs/benchmarks.md
{
  cat <<'HEAD'
# Spec coverage

Every promise of [`how-simba-works`](how-simba-works.md) (and of the issues) mapped to the tests that check it.
Each module keeps its own table in `docs/spec-coverage/<module>.md`; `make docs` gathers
them here.
HEAD
  for f in docs/spec-coverage/core.md docs/spec-coverage/backendtest.md $(ls docs/spec-coverage/*.md | grep -v -e core.md -e backendtest.md); do
    echo
    sed 's/^# /## /' "$f"
  done
} > docs/spec-coverage.md
{
  cat <<'HEAD'
# Deployment: what Simba needs of each server

One table per backend: the server settings Simba relies on, what it checks when it starts, and
what it refuses (with the error you see). Each backend keeps its own table in
`docs/deployment/<backend>.md`; `make docs` gathers them here. The tests that hold each row
against a real server are named in the rows.
HEAD
  for f in docs/deployment/*.md; do
    [ -f "$f" ] || continue
    echo
    sed 's/^# /## /' "$f"
  done
} > docs/deployment.md
echo "docs: wrote docs/benchmarks.md, docs/spec-coverage.md and docs/deployment.md"
