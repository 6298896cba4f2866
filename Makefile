# The two commands of the README, and the checks CI runs.
GO ?= go
GOLANGCI_VERSION := v2.15.0
BIN := $(CURDIR)/.bin

.PHONY: run test faults fuzz lint vet build bench clean screenshots

## run: a local stack with demo data (private PostgreSQL when BERTH_DATABASE_URL is unset)
run:
	$(GO) run ./cmd/berth dev

## test: the whole test suite with -race, against real PostgreSQL and Redis; the
## browser tests (web/) run after the rest: Chromium's load would starve the
## timing-sensitive tests of the surge layers if they ran side by side. One
## package at a time (-p 1): each runs its own tests in parallel already, and
## two packages' multi-process tests together outgrew a stock PostgreSQL's
## 100 connections
test:
	./scripts/testenv.sh sh -c '$(GO) test -race -count=1 -p 1 -timeout 20m $$($(GO) list ./... | grep -v "/web$$") && \
		$(GO) test -race -count=1 -timeout 10m ./web/'

## faults: the fault suite (internal/faults): two berth processes on a throw-away PostgreSQL and
## Redis under load while the database stops, a process is killed, terminated or paused, Redis
## dies, the database's connections run out and the gateway refuses, hangs and lags; then berth
## audit, the history check, Porcupine and the money against the gateway's record. A few minutes; it starts its own servers.
faults:
	$(GO) test -tags faults -race -count=1 -timeout 15m -v -run TestFaults ./internal/faults/

## fuzz: each fuzz target for FUZZTIME (10s); their seed corpora already run in
## make test. A crash found is saved under the package's testdata/fuzz: commit
## it, and it runs in make test from then on. scripts/fuzz-one.sh runs each
## (and once more a run that Go's fuzztime deadline race failed, golang/go#75804)
FUZZTIME ?= 10s
FUZZPARALLEL ?= 2
FUZZ_TARGETS := ./internal/auth:FuzzVerify ./internal/payment:FuzzVerify ./internal/httpapi:FuzzDecode \
	./internal/httpapi:FuzzParseTime ./internal/flight:FuzzHoldSeats ./internal/rental:FuzzValidPeriod
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		GO=$(GO) ./scripts/fuzz-one.sh $$pkg $$name $(FUZZTIME) $(FUZZPARALLEL); \
	done

## screenshots: the README's pictures (docs/img), made by the browser tests
screenshots:
	BERTH_SCREENSHOTS=$(CURDIR)/docs/img ./scripts/testenv.sh $(GO) test -count=1 -run 'TestBrowser' ./web/

## build: the berth binary in ./.bin
build:
	$(GO) build -o $(BIN)/berth ./cmd/berth

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

lint: vet
	test -x $(BIN)/golangci-lint-$(GOLANGCI_VERSION) || \
		(GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION) && \
		 mv $(BIN)/golangci-lint $(BIN)/golangci-lint-$(GOLANGCI_VERSION))
	$(BIN)/golangci-lint-$(GOLANGCI_VERSION) run ./...

## bench: the Go benchmarks (hot-flight holds, seat map, car search and holds)
bench:
	./scripts/testenv.sh $(GO) test -run '^$$' -bench . -benchtime 3s ./internal/flight/ ./internal/rental/

clean:
	rm -rf $(BIN) .berth
