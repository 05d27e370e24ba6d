# medgym: the only entry point for building and testing. .ci/run calls `make ci`.
SHELL   := /bin/bash
BIN     := $(CURDIR)/bin
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
PKGS    := $(addsuffix /...,$(MODULES))
TOOLS   ?= $(HOME)/.cache/medgym/bin
export MEDGYM_TOOLS := $(TOOLS)
SERVICES := dispatcher llm-worker sandbox-worker verifier trainer

.PHONY: all setup build demo test test-short vet fmt tidy ci clean sandbox-image

all: build

## setup: install Debian packages and test servers (idempotent)
setup:
	scripts/setup.sh

## build: bin/medgym and one binary per service
build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/medgym ./cmd/medgym
	@for s in $(SERVICES); do go build -o $(BIN)/$$s ./services/$$s || exit 1; done

## demo: the reference policy on a small MedCalc-Bench sample, embedded defaults
demo: setup build
	$(BIN)/medgym run --dataset medcalcbench --split test --limit 20 --policy reference --store runs

vet:
	go vet $(PKGS)

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$m"; exit 1; }; done

## test: everything, with the race detector (needs `make setup` once)
test: setup
	CI=$${CI:-} go test -race -count=1 -timeout 20m $(PKGS)

test-short:
	go test -short -count=1 $(PKGS)

ci: fmt vet test

sandbox-image:
	scripts/sandbox-image.sh

clean:
	rm -rf $(BIN)
