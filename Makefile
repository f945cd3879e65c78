# Simba's developer entry points. `make demo` needs no server; `make test`
# starts every server the tests need (scripts/services.sh) and runs every
# module's tests with the race detector.

MODULES := deadline term internal session election lock group backend-sql backend-redis backend-zk backend-etcd fxsimba otelsimba gocronsimba simbatest statuspage cmd/simba integration benchpeers
GO ?= go
TESTFLAGS ?= -race -count=1 -timeout 20m
STATICCHECK_VERSION := v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
SIM_SEEDS ?= 10000
GROUP_SIM_SEEDS ?= 1000

MUTATE_SEEDS ?= 300

.PHONY: chaos mutate mutate-subset docs all demo test test-unit lint fmt staticcheck bench bench-peers services services-stop services-status sim-long fuzz tidy

all: lint test

## demo: three nodes electing, handing over and failing over on the in-memory backend
demo:
	cd integration && $(GO) run ./cmd/simba-demo

## test: start the servers if missing, lint, run every module's tests with -race,
## then the seeded simulation with $(SIM_SEEDS) seeds (without -race, for speed;
## the -race run above covers a few hundred seeds)
test: services lint
	@set -e; . ./.services/env; \
	for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test $(TESTFLAGS) ./...); done; \
	echo "== backend-zk without -race (go-zookeeper's own lastZxid race, ADR 0159)"; \
	cd backend-zk && $(GO) test -count=1 -run 'TestInspect(ByName)?ReadsAgainAfterReconnect$$' .
	cd election && SIMBA_SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -timeout 20m -run 'TestSimulation$$' .
	$(MAKE) mutate-subset

## mutate: the mutation gate: every mutation of the catalogue
## (integration/cmd/simba-mutate/catalogue.go, docs/mutation.md) applied one at
## a time to a copy of the workspace, the core tests and the simulation run
## against it; fails naming every survivor. MUTATE_ONLY=a,b runs some.
mutate:
	cd integration && $(GO) run ./cmd/simba-mutate -seeds $(MUTATE_SEEDS) $(if $(MUTATE_ONLY),-only $(MUTATE_ONLY))

## mutate-subset: the fixed subset make test runs (the full run takes longer)
mutate-subset:
	cd integration && $(GO) run ./cmd/simba-mutate -seeds $(MUTATE_SEEDS) -subset -baseline=false
	cd group && SIMBA_SIM_SEEDS=$(GROUP_SIM_SEEDS) $(GO) test -count=1 -timeout 20m -run 'TestSimulation$$|TestSimulationLargeGroup' .

## test-unit: the tests that need no server (core modules only)
test-unit:
	@set -e; for m in deadline term session election lock; do (cd $$m && $(GO) test $(TESTFLAGS) ./...); done

lint: fmt staticcheck
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@./scripts/check-deps.sh
	@./scripts/release.sh check

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

staticcheck:
	@test -x $(GOBIN)/staticcheck || GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@set -e; for m in $(MODULES); do (cd $$m && $(GOBIN)/staticcheck ./...); done

## bench: every benchmark, side by side with the raw backend operations
bench: services
	@set -e; . ./.services/env; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -count 5 ./...); done

## bench-peers: Simba through its public API against the raw primitive pair and
## the peer libraries (benchpeers/; etcd started too, for etcd's own recipes):
## interleaved p50/p90 and block means with a fresh deadline context per
## operation, client CPU and allocations, on loopback (the shared servers) and
## at 0.24 ms and 1 ms round trips (private servers in a network namespace
## behind a delay proxy: needs root), plus each server's own cost (private
## servers); prints the tables, writes docs/bench/peers_run.md (issue 23's
## goals first) and, after a complete run, the goals table of
## docs/bench/_summary.md; regathers docs/benchmarks.md. Several minutes; e.g.
## BENCH_PEERS_FLAGS='-backends redis -nets loopback' for a part of it (its
## goals not run read "not measured"; _summary.md is left as it was).
BENCH_PEERS_FLAGS ?=
bench-peers:
	@SIMBA_SERVICES_EXTRA=etcd ./scripts/services.sh start
	@set -e; . ./.services/env; \
	cd benchpeers && $(GO) build -o ../.services/benchpeers . && ../.services/benchpeers -o ../docs/bench/peers_run.md -summary ../docs/bench/_summary.md $(BENCH_PEERS_FLAGS)
	@./scripts/gather-docs.sh

## chaos: the real-process fault tests run long: DURATION per deployment (all
## deployments in parallel), Redis data-loss faults on unless DATALOSS=0;
## results in docs/reliability.md. ONLY=a,b runs some deployments (names as in
## integration/faults_test.go's setups) and prints their table instead
## (CHAOS_REPORT=file writes it there).
DURATION ?= 1h
DATALOSS ?= 1
ONLY ?=
CHAOS_REPORT ?= $(if $(ONLY),,$(CURDIR)/docs/reliability.md)
chaos: services
	@set -e; . ./.services/env; cd integration && SIMBA_FAULT_DURATION=$(DURATION) SIMBA_FAULT_DATALOSS=$(DATALOSS) \
		SIMBA_FAULT_ONLY=$(ONLY) SIMBA_CHAOS_REPORT=$(CHAOS_REPORT) $(GO) test -count=1 -timeout 0 -parallel 10 -run 'TestFaults$$' -v .

## sim-long: the seeded simulation with many more seeds
sim-long:
	cd election && SIMBA_SIM_SEEDS=$${SIMBA_SIM_SEEDS:-200000} $(GO) test -count=1 -timeout 2h -run TestSimulation

## docs: gather docs/benchmarks.md and docs/spec-coverage.md from the per-module fragments
docs:
	@./scripts/gather-docs.sh

## fuzz: every Fuzz target of every module, FUZZTIME (default 10s) each
fuzz:
	@./scripts/fuzz.sh

## tidy: go mod tidy of every module (cmd/simba's with its siblings replaced for the while: its go.mod has no replace line, ADR 0197)
tidy:
	@./scripts/release.sh tidy

## services: start PostgreSQL, MariaDB, Redis (standalone and Cluster), ZooKeeper (standalone and ensemble) and etcd (one member and a three-member cluster)
services:
	@./scripts/services.sh start

services-stop:
	@./scripts/services.sh stop

services-status:
	@./scripts/services.sh status
