# medgym: the only entry point for building and testing. .ci/run calls `make test`.
SHELL   := /bin/bash
BIN     := $(CURDIR)/bin
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
PKGS    := $(addsuffix /...,$(MODULES))
# the system tests (systemtest/: tests that compose the services) run in their own stage, and so
# does the chart test (it links Helm and the Kubernetes libraries; no race detector)
CHARTTEST := $(CURDIR)/deploy/kubernetes/charttest
UNIT_PKGS := $(filter-out $(CURDIR)/systemtest/... $(CHARTTEST)/...,$(PKGS))
TOOLS   ?= $(HOME)/.cache/medgym/bin
export MEDGYM_TOOLS := $(TOOLS)
SERVICES := dispatcher llm-worker sandbox-worker verifier trainer

.PHONY: fhir test-fhir test-parity all setup setup-test venv build check-data lint library library-again demo test test-go test-system test-long soak test-chart test-compose test-env test-adapters test-harbor test-harbor-all test-hub test-cgroup2 test-short verify-all fuzz bench vet fmt tidy ci clean sandbox-image

all: build

## setup: install Debian packages and nats-server (the scaling benchmarks use it); idempotent.
## The MinIO test server (a 3.5-minute build) comes with setup-test.
setup:
	SKIP_MINIO=1 scripts/setup.sh

## setup-test: setup plus the Docker engine, Compose v2 and the sandbox image the Docker tests use,
## and QEMU with a kernel for the cgroup v2 tests
setup-test:
	WITH_DOCKER=1 WITH_VM=1 SKIP_MINIO=0 scripts/setup.sh
	scripts/docker.sh start
	scripts/sandbox-image.sh
	scripts/venv.sh

## venv: the Python venv (.venv) with the trainer's pinned torch, transformers and peft
## (requirements/; ~2.8 GB of wheels the first time, then a no-op)
venv:
	scripts/venv.sh

## check-data: the shared data folder is there (../shared/data, or MEDGYM_DATA)
check-data:
	@test -d "$(DATA_ROOT)/medcalcbench" || { echo "no data at $(DATA_ROOT): medgym reads the shared data folder (../shared/data beside the checkout, or set MEDGYM_DATA=/path/to/data); it never downloads data"; exit 1; }

## build: bin/medgym and one binary per service
build:
	@mkdir -p $(BIN)
	@echo "building bin/ (a cold first build compiles every dependency: several minutes on 2 cores; later builds take seconds)"
	go build -o $(BIN)/medgym ./cmd/medgym
	@for s in $(SERVICES); do go build -o $(BIN)/$$s ./services/$$s || exit 1; done
	go build -o $(BIN)/env-server ./services/env

## library: generate the task library (EHR databases, biostat, power tasks) from ../shared/data into
## build/library/agent (what the sandbox mounts) and build/library/verifier (task files, truths); see docs/adr/0008.
## Generated again only when the generators (tasks/, schemas/, cmd/medgym/) or the data changed since the last
## generation (build/library/.generated); every test stage names it, and regenerating takes minutes.
## `make library-again` regenerates regardless.
DATA_ROOT      := $(or $(MEDGYM_DATA),$(abspath $(CURDIR)/../shared/data))
LIBRARY_STAMP  := $(CURDIR)/build/library/.generated
LIBRARY_INPUTS := $(shell find $(CURDIR)/tasks $(CURDIR)/schemas $(CURDIR)/cmd/medgym $(DATA_ROOT) -type f 2>/dev/null) $(CURDIR)/go.work
library: build $(LIBRARY_STAMP)
$(LIBRARY_STAMP): $(LIBRARY_INPUTS)
	$(BIN)/medgym tasks generate
	@touch $@
library-again: build
	$(BIN)/medgym tasks generate
	@touch $(LIBRARY_STAMP)

## fhir: the MIMIC-IV demo as FHIR R4 NDJSON (build/fhir/mimic-iv-demo: one file per resource type, LICENSE.md,
## MANIFEST.json with every file's SHA-256), what scripts/fhir-server.sh loads into the FHIR server; ~6 s
FHIR_DIR := $(CURDIR)/build/fhir/mimic-iv-demo
fhir:
	@mkdir -p $(BIN)
	go build -o $(BIN)/medgym ./cmd/medgym
	$(BIN)/medgym tasks fhir --out $(FHIR_DIR)

## demo: the reference policy on a small MedCalc-Bench sample, embedded defaults (checks for the data first, so a
## clone without it fails at once rather than after the build)
demo: check-data setup build
	$(BIN)/medgym run --dataset medcalcbench --split test --limit 20 --policy reference --store runs

## verify-all: run every generated task's reference solution and check it with the strict verifier
verify-all: library
	@# the test's status, not grep's, is the stage's (a pipe had hidden a failure)
	@mkdir -p build; rc=0; MEDGYM_ALL_REFS=1 go test -count=1 -timeout 60m -run TestEveryReferenceSolution -v ./systemtest > build/verify-all.log 2>&1 || rc=$$?; \
		grep -E "passed|FAIL|ok|allrefs_test" build/verify-all.log; exit $$rc

vet:
	go vet $(PKGS)

## lint: golangci-lint (staticcheck, unused, errorlint, forbidigo: .golangci.yml) over every module; installs the
## pinned version the first time (scripts/lint.sh)
lint:
	scripts/lint.sh

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$m"; exit 1; }; done

## test: every check CI runs: gofmt, vet, go mod tidy, race tests (Docker backend included) of the
## packages and of the system tests, the Helm chart's render test, the compose deployment, the sandbox on
## cgroup v2, every reference solution, bounded fuzzing; prints each stage's time
TEST_STAGES := setup-test library fmt vet lint tidy test-go test-fhir test-system test-env test-adapters test-harbor test-chart test-compose test-hub test-cgroup2 verify-all fuzz
test:
	@scripts/stages.sh $(TEST_STAGES)

## test-env: the environment API's Python client and adapters (clients/python) against live `medgym env serve`
## processes the tests start: the layered venv .venv-env (requirements/env-base.txt over .venv), ruff and mypy over the
## client package, the client, Gymnasium
## and TRL adapters, a bounded schemathesis run, the TRL GRPO end-to-end test; see scripts/test-env.sh
test-env: setup-test build library
	scripts/test-env.sh

## test-compose: deploy/compose for real: images built locally (scripts/compose-images.sh), compose up
## with 2 llm-workers and 2 sandbox-workers, a run through it, every episode stored once in its MinIO, down
test-compose: setup-test library
	MEDGYM_COMPOSE=1 MEDGYM_LIBRARY=$(CURDIR)/build/library go test -count=1 -timeout 15m -run '^TestComposeDeploy$$' -v ./systemtest

## test-adapters: the SkyRL-gym, verifiers, verl and OpenRLHF adapters (clients/python), each in its framework's
## venv layer (requirements/env-*.txt; built once, then a no-op), against a live medgym env serve
test-adapters: build library
	scripts/test-adapters.sh

## test-harbor: the Harbor export against the real harbor 0.25.0 (Python 3.13 runtime from Debian trixie,
## scripts/py313.sh): the oracle scores 1.0 on the first test task of 3 datasets through medgym's verifier, a spy agent
## finds no answer key and no network, parity with medgym run; then the NeMo Gym resources server with nemo-gym 0.4.0's
## classes; see scripts/test-harbor.sh. Cold cache: ~8 minutes on 2 shared cores (runtime and venvs kept: ~3)
test-harbor: setup-test build library
	scripts/test-harbor.sh

## test-harbor-all: test-harbor over the first test task of every dataset of the library (outside make test)
test-harbor-all: setup-test build library
	HARBOR_DATASETS=npowerai,biostat,clinical_ml,treqs,ehrsql2024,mimic_iii,eicu scripts/test-harbor.sh

## test-hub: the OpenEnv hub package (deploy/openenv) as the hub checks it, with openenv 0.10.0's own validator:
## static level, the layout push expects, and the runtime level against the image it builds FROM the hub image
## (scripts/hub-image.sh, from this repository's own images; nothing pulled or pushed); see scripts/test-hub.sh
test-hub: build library
	scripts/test-hub.sh

## test-parity: the reference solution of the first 2 tasks of every category of every dataset through medgym run,
## /v1/sessions, OpenEnv HTTP, OpenEnv's WebSocket and MCP, with the door × dataset matrix (outside make test; make
## test-system plays one task per dataset)
test-parity: setup-test library
	MEDGYM_PARITY_TASKS=2 MEDGYM_LIBRARY=$(CURDIR)/build/library go test -count=1 -timeout 70m -run '^TestRewardParityAcrossDoors$$' -v ./systemtest/

## test-cgroup2: the sandbox's cgroup tests and abuse suite on a cgroup v2 kernel (a QEMU VM)
test-cgroup2: setup-test
	scripts/cgroup2-vm.sh

## test-go: the Go tests of every module but systemtest, with the race detector (installs and starts what they need)
test-go: setup-test library
	@# tasks/generate runs without the race detector only (the second command): its code starts no
	@# goroutine (only its tests do, to run reference solutions), and under the race detector its
	@# pure-Go SQLite is ~20x slower (169 s of the race run's package time). tasks/generate/mimicfhir likewise
	@# (its conversion starts no goroutine); its FHIR server test is the test-fhir stage.
	MEDGYM_DOCKER=1 MEDGYM_LIBRARY=$(CURDIR)/build/library go test -race -count=1 -timeout 30m \
		$$(go list $(UNIT_PKGS) | grep -v -e '/tasks/generate$$' -e '/tasks/generate/mimicfhir$$')
	go test -count=1 -timeout 20m -skip '^TestFHIRServerAgreesWithTheTables$$' ./tasks/...

## test-fhir: the FHIR server (HAPI FHIR, deploy/fhir-server) built with Maven, started by scripts/fhir-server.sh
## with the MIMIC-IV demo as FHIR, and its answers checked against the source tables and the generated read tasks'
## truths (docs/adr/0038). Measured on 2 busy cores: 50-85 s with the jar cached (conversion 3-7 s, JVM start and
## load 10-40 s, ~2,000 queries); a first build adds ~40 s (Maven, ~/.m2 warm) or ~60 s (cold); JVM RSS ~750 MB
## (-Xmx1g), Maven's ~580 MB
test-fhir:
	WITH_FHIR=1 SKIP_MINIO=1 scripts/setup.sh
	go test -count=1 -timeout 10m -run '^TestFHIRServerAgreesWithTheTables$$' -v ./tasks/generate/mimicfhir

## test-system: the system tests (systemtest/: the pipeline end to end, chaos, outages, the cluster,
## deployment files, the trainer against a pipeline) with the race detector
test-system: setup-test library
	MEDGYM_DOCKER=1 MEDGYM_LIBRARY=$(CURDIR)/build/library go test -race -count=1 -timeout 30m -skip '$(LONG_TESTS)' ./systemtest/...

## test-long: the system tests too long for every CI run (outside `make test`): the 3-node cluster across network
## namespaces (as root; several minutes of outages, cuts and restarts) and the kill-only chaos run of the reference
## model (TestSoak's slice in make test kills every kind of process, and more)
LONG_TESTS := ^(TestClusterAcrossHosts|TestChaosExternalProcesses)$$
test-long: setup-test library
	MEDGYM_LIBRARY=$(CURDIR)/build/library go test -race -count=1 -timeout 30m -run '$(LONG_TESTS)' -v ./systemtest/

## soak: the exactly-once soak (outside `make test`; docs/soak.md): TestSoak with SOAK_EPISODES (5000) episodes over
## SOAK_RUNS (5) concurrent runs and SOAK_FAULTS (40) faults drawn from SOAK_SEED (1), once on a directory store and
## once on MinIO. `make test-system` runs TestSoak's small default (200 episodes, 6 faults).
SOAK_SEED ?= 1
SOAK_EPISODES ?= 5000
SOAK_RUNS ?= 5
SOAK_FAULTS ?= 40
soak: setup-test
	for store in dir minio; do \
		MEDGYM_SOAK_STORE=$$store MEDGYM_SOAK_SEED=$(SOAK_SEED) MEDGYM_SOAK_EPISODES=$(SOAK_EPISODES) \
		MEDGYM_SOAK_RUNS=$(SOAK_RUNS) MEDGYM_SOAK_FAULTS=$(SOAK_FAULTS) \
		go test -count=1 -timeout 4h -run '^TestSoak$$' -v ./systemtest/ || exit 1; \
	done

## test-chart: the Helm chart (deploy/kubernetes): rendered through Helm's Go library, decoded strictly
## with the Kubernetes and KEDA types, its names against schemas and the services' live /metrics
test-chart: setup-test library
	cd $(CHARTTEST) && MEDGYM_LIBRARY=$(CURDIR)/build/library go test -count=1 -timeout 15m ./...

test-short:
	go test -short -count=1 $(PKGS)

## fuzz: each fuzz target for a bounded number of executions, sized to about 10 s each on a 2-core
## machine. A count, not a duration: with a duration (-fuzztime=20s) Go 1.26's fuzz coordinator can report
## "context deadline exceeded" as a failure when the time runs out mid-execution, with no failing input
## (golang/go#75804, fixed in Go 1.27). FUZZTIME=30s (or 1000x) overrides every target's budget.
FUZZTIME ?=
FUZZ_TARGETS := schemas:FuzzDecode:100000x agent:FuzzParse:300000x services/verifier/verify:FuzzParsers:100000x services/verifier/verify:FuzzCheck:5000x
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		dir=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; over="$(FUZZTIME)"; budget=$${over:-$$budget}; \
		echo "fuzz $$name in $$dir ($$budget)"; \
		(cd $$dir && go test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$$budget -timeout=5m .) || exit 1; \
	done

ci: test

sandbox-image:
	scripts/sandbox-image.sh

clean:
	rm -rf $(BIN)
## bench: every benchmark suite, figures printed and written to bench/results/<date>-<commit>.md (bench/README.md)
bench: ; mkdir -p bench/results && go run ./bench -out bench/results/$$(date -u +%Y-%m-%d)-$$(git rev-parse --short HEAD).md
