# Simba's developer entry points. `make demo` needs no server; `make test`
# starts every server the tests need (scripts/services.sh) and runs every
# module's tests with the race detector.

MODULES := deadline term internal session election lock group backend-sql backend-redis backend-zk fxsimba otelsimba simbatest statuspage cmd/simba integration benchpeers
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
	cd group && SIMBA_SIM_SEEDS=$(GROUP_SIM_SEEDS) $(GO) test -count=1 -timeout 20m -run 'TestSimulation$$' .

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
## the peer libraries on the same servers (benchpeers/; etcd started too, for
## etcd's own recipes), interleaved; prints the
## tables, keeps them in docs/bench/peers_run.md and regathers docs/benchmarks.md
BENCH_PEERS_FLAGS ?=
bench-peers:
	@SIMBA_SERVICES_EXTRA=etcd ./scripts/services.sh start
	@set -e; . ./.services/env; out=$$(mktemp); \
	(cd benchpeers && $(GO) run . $(BENCH_PEERS_FLAGS)) > $$out; cat $$out; \
	{ echo "# Peer benchmark: the last run of make bench-peers"; echo; cat $$out; } > docs/bench/peers_run.md; rm -f $$out
	@./scripts/gather-docs.sh

## chaos: the real-process fault tests run long: DURATION per backend (all
## backends in parallel), Redis data-loss faults on unless DATALOSS=0;
## results in docs/reliability.md
DURATION ?= 1h
DATALOSS ?= 1
chaos: services
	@set -e; . ./.services/env; cd integration && SIMBA_FAULT_DURATION=$(DURATION) SIMBA_FAULT_DATALOSS=$(DATALOSS) \
		SIMBA_CHAOS_REPORT=$(CURDIR)/docs/reliability.md $(GO) test -count=1 -timeout 0 -parallel 6 -run 'TestFaults$$' -v .

## sim-long: the seeded simulation with many more seeds
sim-long:
	cd election && SIMBA_SIM_SEEDS=$${SIMBA_SIM_SEEDS:-200000} $(GO) test -count=1 -timeout 2h -run TestSimulation

## docs: gather docs/benchmarks.md and docs/spec-coverage.md from the per-module fragments
docs:
	@./scripts/gather-docs.sh

## fuzz: every Fuzz target of every module, FUZZTIME (default 10s) each
fuzz:
	@./scripts/fuzz.sh

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy); done

## services: start PostgreSQL, MariaDB, Redis (standalone and Cluster) and ZooKeeper (standalone and ensemble)
services:
	@./scripts/services.sh start

services-stop:
	@./scripts/services.sh stop

services-status:
	@./scripts/services.sh status
