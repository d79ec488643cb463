# billing — `make help` lists the targets. `make test` is what CI runs.
.DEFAULT_GOAL := help
SHELL := /bin/bash
GO ?= go
BIN := bin/billing
# The version and VCS revision stamped into the binary and the image
# (`billing version`, billing_build_info). The image build has no .git (see
# .dockerignore), so the revision is passed, not read by the toolchain there.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo -dirty)
LDFLAGS := -X github.com/acme/billing/internal/version.version=$(VERSION) -X github.com/acme/billing/internal/version.revision=$(REVISION)
# The image `make image` builds and tags with $(VERSION).
IMAGE ?= billing
# The Go release: go.mod's toolchain line. A Go whose default is
# GOTOOLCHAIN=local (this repository's build machines: their go.env says so)
# ignores that line; naming the release makes the go command fetch it from the
# Go module proxy and run it. An explicit GOTOOLCHAIN in the environment wins
# (scripts/deps.sh refuses one that runs an older Go).
export GOTOOLCHAIN ?= $(shell awk '$$1 == "toolchain" {print $$2}' go.mod)
# Every build and test here but the -race ones (RACE) is built as the
# binary ships (make build, the Dockerfile): without cgo, paths trimmed. One
# configuration lets the go command build each package once for all of
# them: bin/billing, e2e's and bench's tests of the root module's packages,
# the released binaries the upgrade test builds and the per-stage benchmarks
# share what the first of them compiled. Under two other
# configurations they compiled most of the graph twice from an empty build
# cache. -race needs cgo, and its build is its own whatever the flags.
export CGO_ENABLED ?= 0
export GOFLAGS += -trimpath
RACE = CGO_ENABLED=1 $(GO) test -race
# Short fuzzing of the event decoder, the gateway reply reader and the patched
# kafka-go's read path inside `make test`: a count of inputs, not a duration,
# because a time limit that expires while an input is being minimized fails
# the run with "context deadline exceeded" (a go test -fuzz quirk). In CI it
# is a smoke: the seed corpus and the inputs the fuzzer kept (testdata/fuzz,
# the build cache) plus a few tens of thousands of new ones, on a machine
# where every fuzzing second is two cores taken from the other tests.
# `make fuzz` runs ten times as many; run it after changing one of them.
FUZZTIME ?= 100000x
# The gateway reply reader's fuzz inputs cost several times the decoder's in
# CPU (each is also read by encoding/json, to compare): fewer of them.
FUZZTIME_REPLY ?= 30000x
# The same for kafka-go's read path, with minimization bounded too (each new
# input is minimized for up to 60 s by default).
FUZZTIME_KAFKA ?= 30000x
# The three fuzz runs, each followed by its count of inputs.
FUZZ_DECODE = $(GO) test -vet=off -run='^$$' -fuzz=FuzzDecode ./adapters/in/kafka/wire -fuzztime=
FUZZ_REPLY = $(GO) test -vet=off -run='^$$' -fuzz=FuzzReadReply ./adapters/out/http/reply -fuzztime=
FUZZ_KAFKA = $(GO) -C third_party/kafka-go test -vet=off -run='^$$' -fuzz='^FuzzBillingPatchRead$$' -fuzzminimizetime=100x . -fuzztime=

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install what the tests and the lint need (Postgres server, PgBouncer, JDK, Maven, Kafka broker jars, Prometheus and promtool, stripe-mock, squawk, golangci-lint) if missing
	@scripts/deps.sh

.PHONY: build
build: ## build the static binary bin/billing
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/billing

.PHONY: image
image: ## build the container image $(IMAGE):$(VERSION), version and revision stamped (needs Docker)
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE):$(VERSION) .

.PHONY: test test-unit test-service test-e2e test-deploy test-bench test-kafka-go
# The repository holds four modules: the service's (the root: what the
# binary and its unit tests need), and the end-to-end suite (e2e/), the
# manifests' and rules' checks (deploy/) and the benchmark driver (bench/),
# each with its own go.mod, so that the service's module does not carry
# Prometheus, Kubernetes or compose as dependencies. They run side by side
# (make -j), each test module's output kept together (-O).
#
# third_party/kafka-go is kafka-go as published plus a small patch
# (third_party/kafka-go/PATCHES.md): it is kept byte for byte as upstream wrote
# it, some of it not gofmt-clean, so that the patch stays a readable diff. It
# is its own module too. The patch's tests run here, and upstream's tests of
# the files the patch touches, from the module cache against a copy
# (scripts/kafka-go-upstream-tests.sh; kafka-go's tests that need its docker
# brokers do not run).
GOFILES = $$(git ls-files '*.go' ':!third_party/')
MODULES = . e2e deploy bench
# Every go test of `make test` runs all of go vet's checks (-vet=all: what
# `go vet` runs, where go test's default is a subset) on the graph it builds
# for the tests, so vet adds no build of its own. The fuzz runs, which build
# the same packages instrumented, need no second vet.
VETALL = -vet=all

# `make test` does not run scripts/deps.sh: CI (.ci/run) runs it before, and
# on a developer's machine `make deps` once is enough. BILLING_E2E=1 makes a
# test whose program is missing fail, naming scripts/deps.sh.
test: ## gofmt, go vet and all tests, with -race but for deploy/ and bench/ (real Postgres, in-process and real Kafka, real Prometheus), short fuzz; needs `make deps` once
	@test -z "$$(gofmt -l $(GOFILES))" || { echo "gofmt needed:"; gofmt -l $(GOFILES); exit 1; }
	@! git grep -n -E 'CONTRACT(\.md| §)' -- ':!third_party' ':!infra/postgres/testdata/released' ':!Makefile' || { echo "cite docs/interface.md: a clone has no CONTRACT.md"; exit 1; }
	$(MAKE) --no-print-directory -j4 -Otarget test-service test-e2e test-deploy test-bench test-kafka-go

# The fast lane: no -race (a second build of the graph), and every test
# that needs a program from outside Go (Postgres, a real broker, PgBouncer,
# stripe-mock) skipped by -short (internal/testkit/needs). It needs no
# scripts/deps.sh.
test-unit: ## the service's module with -short: every test that needs no Postgres, real broker, PgBouncer or stripe-mock (no deps, about a minute)
	$(GO) test -short -count=1 ./...

# The per-stage CPU benchmarks run as a smoke: a hundred iterations each, so
# that one that breaks fails here; their figures come from
# `go test -bench -benchmem -count 6`.
STAGE_BENCH = Decode|Charge|ReadReply|Classify|Grouper
test-service: ## the service's module: go vet, every package's tests with -race, a smoke run of the per-stage benchmarks, then a short fuzz of the event decoder and the gateway reply reader
	BILLING_E2E=1 $(RACE) $(VETALL) -count=1 -timeout 30m ./...
	$(GO) test -vet=off -run='^$$' -bench='$(STAGE_BENCH)' -benchtime=100x -benchmem ./core/order ./adapters/in/kafka/wire ./adapters/out/http ./adapters/out/http/reply ./infra/postgres
	$(FUZZ_DECODE)$(FUZZTIME)
	$(FUZZ_REPLY)$(FUZZTIME_REPLY)

# e2e and the bench driver's smoke test run bin/billing, built once here
# (as `make build` and the image build it), rather than each building its own.
# Every e2e test runs beside others (t.Parallel), each on its own database
# and its own topics and consumer group of one shared broker (the broker
# restart test has a broker of its own), E2E_PARALLEL at a time: most of one
# waits (for a back-off, an attempt's life, a broker restart, a rebalance),
# so more of them than cores share the machine well; one at a time they took
# the longest of make test.
# Without -race: the service under test is bin/billing, a separate process
# built as it ships; what runs concurrently in the test process is the
# harness (the stub gateway, the load, the scrapes), whose packages the
# root module's tests run with -race. Here -race only made the harness
# cost more CPU, on a machine where CI is bound by its two cores.
E2E_PARALLEL ?= 3
test-e2e: build ## go vet, the built binary against a real Kafka broker, Postgres and Prometheus
	BILLING_E2E=1 BILLING_BIN=$(CURDIR)/$(BIN) $(GO) -C e2e test $(VETALL) -count=1 -parallel $(E2E_PARALLEL) -timeout 30m ./...

# Without -race (`make test` keeps it everywhere else): these tests read,
# render and parse files and run promtool and a build; what they share runs
# through sync.OnceValues and sync.Map, and none of the service's concurrent
# code runs here. The race build of their graph (Kubernetes, Prometheus) was
# the largest compile of make test; the plain one is the graph `make lint`'s
# go vet builds anyway.
test-deploy: ## go vet, the manifests, rules (promtool), dashboard and image checks
	BILLING_E2E=1 $(GO) -C deploy test $(VETALL) -count=1 -timeout 30m ./...

# Without -race too: what runs concurrently here is the driver's own
# tooling (its load, its scrapes) and the in-process broker of the smoke run,
# not the service (bin/billing, a separate process). Under -race the
# in-process broker made this leg cost several times the CPU, on a machine
# where CI is bound by its two cores.
test-bench: build ## go vet, the benchmark driver's own tests (its pgbench scripts against Postgres, a smoke run of bin/billing)
	BILLING_E2E=1 BILLING_BIN=$(CURDIR)/$(BIN) $(GO) -C bench test $(VETALL) -count=1 -timeout 30m ./...

test-kafka-go: ## the patched kafka-go's tests, upstream's tests of the files the patch touches, a short fuzz of its read path
	cd third_party/kafka-go && $(RACE) $(VETALL) -count=1 -run 'BillingPatch' ./
	GO="$(GO)" scripts/kafka-go-upstream-tests.sh
	$(FUZZ_KAFKA)$(FUZZTIME_KAFKA)

.PHONY: fuzz
# Ten times `make test`'s inputs for each fuzz target (a few minutes on
# two cores): for a change to the decoder, the reply reader or the kafka-go
# patch, before it is pushed. What it finds is kept under the build cache's
# fuzz directory, so CI's short runs start from it on the same machine; a
# failing input is written to the package's testdata/fuzz, to commit with
# the fix.
fuzz: ## ten times make test's fuzzing of the event decoder, the gateway reply reader and kafka-go's patched read path (a few minutes)
	$(FUZZ_DECODE)1000000x
	$(FUZZ_REPLY)300000x
	$(FUZZ_KAFKA)300000x

.PHONY: vulncheck
# govulncheck against one snapshot of the Go vulnerability database, VULNDB: the
# golang.org/x/vulndb module, fetched through the Go module proxy like any
# module, so the check needs no other host and gives the same answer until
# VULNDB is bumped (`go list -m golang.org/x/vulndb@latest` names the newest).
# Its data/osv holds one OSV file per vulnerability, a directory govulncheck
# reads as a database, indexing it itself. Fails (exit 3) on a vulnerability
# the code reaches. govulncheck itself is built once by scripts/deps.sh (check
# govulncheck) into the cache directory beside golangci-lint's, so that an
# empty build cache does not mean compiling it again; GOVULNCHECK_VERSION must
# match deps.sh's.
GOVULNCHECK_VERSION = v1.9.0
GOVULNCHECK ?= $(or $(BILLING_CACHE_DIR),/var/cache/billing)/govulncheck-$(GOVULNCHECK_VERSION)/govulncheck
VULNDB ?= v0.0.0-20261105234957-e22db6528018
vulncheck: ## govulncheck ./... against the pinned vulnerability database (VULNDB); fails on reachable vulnerabilities
	$(if $(filter file,$(origin GOVULNCHECK)),@scripts/deps.sh govulncheck)
	$(GO) mod download golang.org/x/vulndb@$(VULNDB)
	$(GOVULNCHECK) -db "file://$$($(GO) env GOMODCACHE)/golang.org/x/vulndb@$(VULNDB)/data/osv" ./...

.PHONY: demo
demo: ## run the service in-process against sample events and print what happened
	@scripts/deps.sh postgres
	$(GO) run -tags demo ./cmd/billing demo

# `make bench` flags, e.g. BENCHFLAGS="-reps 5 -inflight 1,16,64"
# (go -C bench run ./cmd/billbench -h lists them). The driver is the bench
# module's; it measures bin/billing, built in the service's module.
BENCHFLAGS ?=
BILLBENCH = $(GO) -C bench run ./cmd/billbench -root $(CURDIR) -bin $(CURDIR)/$(BIN)

.PHONY: bench
bench: deps build ## throughput report: bin/billing vs pgbench on real Postgres and Kafka (~10 min), in bench/out/report.md
	$(BILLBENCH) -out $(CURDIR)/bench/out/report.md $(BENCHFLAGS)

.PHONY: bench-memory
bench-memory: deps build ## only the memory lines of `make bench`: peak RSS at in-flight 64 with ~900 KB events of empty headers, of a padded value, and with zstd and gzip bombs on every partition (~2 min), in bench/out/memory.md
	$(BILLBENCH) -flood-only -out $(CURDIR)/bench/out/memory.md $(BENCHFLAGS)

.PHONY: lint
# golangci-lint runs outside `make test`; CI runs `make lint` after it and
# fails on any finding (.golangci.yaml says what it checks). Every module is
# linted with the root's .golangci.yaml (-c: not left to the upward search
# from the module's directory), and all of them are, before it fails.
# It is built once by scripts/deps.sh (check golangcilint: no allowed registry
# ships it prebuilt) into the cache directory beside stripe-mock's, outside the
# repository and the build cache; GOLANGCI_LINT_VERSION must match deps.sh's.
GOLANGCI_LINT_VERSION = v2.15.0
GOLANGCI_LINT ?= $(or $(BILLING_CACHE_DIR),/var/cache/billing)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
# squawk lints every migration file (migrations/.squawk.toml) and must fail a
# planted CREATE INDEX without CONCURRENTLY (scripts/squawk.sh).
# go vet is not run here on its own: golangci-lint's govet runs go vet's
# analyzers (but loopclosure, which go.mod's go line makes moot) on every
# module's code and tests, the demo-tagged files included (.golangci.yaml's
# build tags), and `make test` vets every module without the tag (-vet=all).
# A `go vet` here repeated both, and from an empty build cache it compiled
# the root module's test graph once more.
lint: ## squawk on every migration, golangci-lint (.golangci.yaml: go vet's analyzers, staticcheck and the linters that earn their place), every module; fails on any finding
	$(if $(filter file,$(origin GOLANGCI_LINT)),@scripts/deps.sh golangcilint)
	scripts/squawk.sh
	@fail=0; for m in $(MODULES); do \
		echo "lint ($$m)"; \
		(cd $$m && $(GOLANGCI_LINT) run -c $(CURDIR)/.golangci.yaml ./...) || fail=1; \
	done; exit $$fail

.PHONY: clean
clean: ## remove build output
	rm -rf bin bench/out
