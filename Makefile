# leasecron — run `make help` for the list of targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/leasecron
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# make test refuses to pass by skipping: Azurite tests fail when Azurite is missing.
export LEASECRON_REQUIRE_AZURITE ?= 1

.PHONY: help deps build test test-long test-bulk test-short race fuzz lint demo bench bench-quick chaos chaos-shards screenshots clean sim sim-long sim-mutants

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The library, the command (its own module: cobra, viper and the
# OpenTelemetry SDK stay out of the library), the tools (tests, benchmarks,
# the reliability suite, the demo) and the examples.
MODULES := . cmd/leasecron tools examples

deps: ## install Go modules, the pinned Azurite (npm ci) and build the TypeScript client
	@for m in $(MODULES); do (cd $$m && $(GO) mod download) || exit 1; done
	@command -v node >/dev/null || { echo "Node.js is required: apt-get install -y nodejs npm"; exit 1; }
	@if [ ! -x node_modules/.bin/azurite ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
		npm ci --no-audit --no-fund --loglevel=error; fi
	@if [ ! -x clients/typescript/node_modules/.bin/tsc ] || [ clients/typescript/package-lock.json -nt clients/typescript/node_modules/.package-lock.json ]; then \
		(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error); fi
	@if [ ! -f clients/typescript/dist/src/index.js ] || [ -n "$$(find clients/typescript/src clients/typescript/test -newer clients/typescript/dist/src/index.js)" ]; then \
		(cd clients/typescript && npm run --silent build); fi

build: ## build bin/leasecron
	cd cmd/leasecron && $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(CURDIR)/$(BIN) .

# The library module, the command's module, then the tools module (the
# end-to-end tests of the built binary and the dashboard in Chromium, the
# short reliability scenarios, the benchmark and report code), then the
# examples module (builds and runs examples/worker and examples/leader),
# in one report.
test: deps ## unit + integration tests against private Azurites (under 15 min)
	@mkdir -p bin && cd tools && $(GO) build -o ../bin/testreport ./testreport
	@set -o pipefail; { $(GO) test -json -count=1 -timeout 10m . ./trafficcop ./internal/runs ./... 2>&1; \
		(cd cmd/leasecron && $(GO) test -json -count=1 -timeout 5m ./... 2>&1); \
		(cd tools && $(GO) test -json -count=1 -timeout 14m -parallel 4 -skip '^($(TEST_LONG_TOOLS))$$' ./e2e/ ./... 2>&1); \
		(cd examples && $(GO) test -json -count=1 -timeout 5m ./... 2>&1); \
		(cd tools && LEASECRON_SIM=1 SIM_FIXED=$(TEST_SIM_SEEDS) SIM_FIXED_API=1 SIM_SHRINK=0 $(GO) test -json -count=1 -timeout 5m -run '^TestSim$$' ./sim/ 2>&1); } | bin/testreport -log test.log

# The simulator's first TEST_SIM_SEEDS fixed seeds and its first seed
# with a client through the HTTP API (make sim runs all 24 and 4) come
# last, alone: they keep both cores busy for about 10 s,
# which beside the end-to-end tests would break their bounds about time.
# A failing seed is reported unshrunk; make sim SEED=n shrinks it.
TEST_SIM_SEEDS ?= 4

# The end-to-end tests waiting on worker processes mostly sleep: four at
# a time (-parallel 4 above) keeps both cores busy (six at a time broke
# their on-time bounds). go test starts the packages in the order given:
# the root package, the longest of the library's, first, and in tools the
# end-to-end package (about 8 minutes), beside which only short packages
# run. The CPU-bound suites that ran beside it before — the short chaos
# scenarios and the benchmark scenarios at tiny sizes — broke its bounds
# about time when they overlapped it, and kept make test over its 15
# minutes on a 2-core machine when they did not: they run in make
# test-long (and make chaos and make bench run the whole suites). make
# test-long also adds the tests too long for make test's budget (a fleet
# idle for five minutes).
TEST_LONG_TOOLS = TestSim|TestScenariosOnAzurite|TestAccountScenario|TestShortLeaderKill|TestShortWorkerKill|TestShortSigterm
test-long: deps build ## long tests (about 50 min): the short chaos scenarios (leader SIGKILL under backlog, worker SIGKILL mid-task, leader SIGTERM) and the benchmark scenarios at tiny sizes; run history at 100,000 records; priorities behind 10,000 low tasks, weighted shares, fairness behind a tenant's 5,000 and 3:1 weights, pools of 500 + 500 (queues on internal/queuesrv unless ROUTES_QUEUES=azurite); tasks due now after 5 idle minutes; a 10/1m rate limit over 100 tasks; 20 kills of a shard owner; 10 min of stable shard ownership; resharding 8 → 16 → 8 under 3,000 tasks; a rolling upgrade from the previous release, then sharding; the issue-38 crossings black-box; an @every 2s cadence across SIGTERM with 15 s leases; run retention by the leader (1m retention, 1m cleaning); a bulk requeue of BULK_N (10,000) dead letters through a SIGKILL, on in-memory queues (BULK_QUEUES=memory; see make test-bulk); 40 SIGKILLs at the four workflow failpoints
	LEASECRON_LONG=1 $(GO) test -count=1 -timeout 20m -v -run 'TestHistoryAtScale' ./internal/runs/
	LEASECRON_LONG=1 $(GO) test -count=1 -timeout 30m -v -run 'TestWorkerPoolsRunOnlyTheirOwnTypes|TestPrioritiesAtScale|TestWeightedPrioritiesShareAtScale|TestFairnessAtScale' .
	cd tools && $(GO) test -count=1 -timeout 20m -v -run '^(TestScenariosOnAzurite|TestAccountScenario|TestShortLeaderKill|TestShortWorkerKill|TestShortSigterm)$$' ./bench/ ./chaos/
	cd tools && LEASECRON_LONG=1 BULK_QUEUES=$${BULK_QUEUES-memory} $(GO) test -count=1 -timeout 60m -v -run 'TestTasksDueNowStartWithinASecond|TestRateLimits|TestShardsThroughManyKills|TestShardOwnershipStable|TestReshardingUnderLoad|TestRollingUpgradeThenSharding|TestRollingSwitchToShardingLosesNothing|TestUniqueKeyHeldDuringRetryBackoff|TestBulkRequeueRunsEachDeadLetterOnceMore|TestCadenceEvery2sAcrossSIGTERM|TestRunRetentionByLeader|TestBulkRequeueSurvivesAKill|TestWorkflowSurvivesKills' ./e2e/

# The issue's 100,000 dead letters: Azurite's queue get and delete scan the
# whole queue, so the queues are served by internal/queuesrv (the same
# REST protocol, in memory) while tables and blobs stay on Azurite.
test-bulk: deps build ## a bulk requeue of 100,000 dead letters through a SIGKILL of the worker running it (about 25 min; the queues in memory, tables and blobs on Azurite)
	cd tools && LEASECRON_LONG=1 BULK_QUEUES=memory BULK_N=$${BULK_N-100000} $(GO) test -count=1 -timeout 300m -v -run 'TestBulkRequeueSurvivesAKill' ./e2e/

# The whole-fleet simulator (tools/sim, docs/simulator.md): workers and
# clients in one process over an in-memory storage account, under virtual
# time, with faults; every README promise checked as code. SEED=n replays one (SIM_TRIES=n runs it
# until it fails; SIM_LOG=debug SIM_LOGFILE=f keeps its whole log).
SEEDS ?= 10000
sim: ## the simulator's 24 fixed seeds and 4 with a client through the HTTP API (about 1.5 min); SEED=n replays one seed (SIM_API=1 with the API), shrinking a failure to a short operation log
	cd tools && LEASECRON_SIM=1 SIM_SEED=$(SEED) $(GO) test -count=1 -timeout 30m -run 'TestSim$$' -v ./sim/ 2>&1 | grep -v '^=== \|^--- PASS\|^    --- PASS' | tail -40

sim-long: ## SEEDS seeds of the simulator (default 10,000: about 1.5–2.5 s each, two at a time) from SIM_FROM (default 1000); the coverage report goes to sim-long.txt, which shows progress every 50 seeds while it runs, and each failing seed's violations as it fails
	cd tools && SIM_SEEDS=$(SEEDS) SIM_FROM=$${SIM_FROM-1000} SIM_REPORT=$(CURDIR)/sim-long.txt $(GO) test -count=1 -timeout 0 -run 'TestSimLong' ./sim/ 2>&1 | tail -60

sim-mutants: ## the simulator's honesty test: each deliberate defect (internal/mutate) is caught by its invariant within the fixed seeds (about 10 min)
	cd tools && $(GO) test -tags leasecron_mutate -count=1 -timeout 2h -run 'TestMutations' -v ./sim/ 2>&1 | grep -E 'caught|not caught|^(ok|FAIL|---)' | tail -40

# Each fuzz target runs for FUZZTIME in turn (make test replays only their
# seeds and the failing inputs kept under testdata/fuzz/).
FUZZTIME ?= 2m
fuzz: ## every fuzz target for FUZZTIME each (default 2m: about 40 min); FUZZ=regexp picks targets
	@tools/fuzz/run.sh $(FUZZTIME) '$(or $(FUZZ),.)'

test-short: ## unit tests only (no Azurite)
	@for m in $(MODULES); do (cd $$m && $(GO) test -short -count=1 ./...) || exit 1; done

race: deps ## tests with the race detector
	@for m in $(MODULES); do (cd $$m && $(GO) test -race -count=1 -timeout 20m ./...) || exit 1; done

GOLANGCI_LINT_VERSION := v2.15.0

bin/golangci-lint-$(GOLANGCI_LINT_VERSION):
	@mkdir -p bin && GOBIN=$(CURDIR)/bin/gcl-$(GOLANGCI_LINT_VERSION) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv bin/gcl-$(GOLANGCI_LINT_VERSION)/golangci-lint $@ && rmdir bin/gcl-$(GOLANGCI_LINT_VERSION)

# What an embedder links: the examples' worker must not carry the
# command's dependencies (cobra, viper, yaml) or the OpenTelemetry SDK's
# exporters (OTLP, gRPC).
EMBED_FORBIDDEN := spf13/cobra|spf13/viper|yaml|google.golang.org/grpc|otlptrace|otel/sdk

lint: bin/golangci-lint-$(GOLANGCI_LINT_VERSION) ## gofmt, vet, golangci-lint (layers, imports, slog, errors, staticcheck) on every module, API and layering checks, cross-builds, tidy, the embedder's binary, compose/template validation
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) vet ./... && $(CURDIR)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done
	cd tools && $(GO) run ./apicheck ..
	cd tools && $(GO) run ./layercheck ..
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) build ./...
	cd cmd/leasecron && GOOS=darwin $(GO) build ./... && GOOS=windows $(GO) build ./...
	cd examples && GOOS=darwin $(GO) build ./... && GOOS=windows $(GO) build ./...
	@for m in $(MODULES); do (cd $$m && cp go.mod /tmp/lc-go.mod && cp go.sum /tmp/lc-go.sum && $(GO) mod tidy && \
		if ! cmp -s go.mod /tmp/lc-go.mod || ! cmp -s go.sum /tmp/lc-go.sum; then \
		echo "go mod tidy changes $$m/go.mod or go.sum"; cp /tmp/lc-go.mod go.mod; cp /tmp/lc-go.sum go.sum; exit 1; fi) || exit 1; done
	@n=$$(sed -n '/^require (/,/^)/p' go.mod | grep -vc 'require (\|)\|// indirect'); echo "library go.mod: $$n direct requirements"; \
		if [ $$n -gt 12 ]; then echo "the library may require at most 12 modules directly (embedders link them)"; exit 1; fi
	@mkdir -p bin && cd examples && $(GO) build -o ../bin/example-worker ./worker
	@if $(GO) version -m bin/example-worker | grep -E '$(EMBED_FORBIDDEN)'; then echo "examples/worker links the modules above: the library must not depend on them"; exit 1; fi
	@echo "examples/worker: $$(du -h bin/example-worker | cut -f1), $$($(GO) version -m bin/example-worker | grep -c '^\s*dep') modules, none of the command's"
	@if [ -x deploy/validate.sh ]; then deploy/validate.sh; fi

demo: deps build ## Azurite + three workers + scheduled work + blackboard, live (Ctrl-C stops all)
	@cd tools && $(GO) build -o ../bin/demo ./demo
	@LEASECRON_BIN=$(CURDIR)/$(BIN) bin/demo

chaos: deps build ## reliability suite (long; regenerates docs/RELIABILITY.md)
	@set -o pipefail; cd tools && $(GO) test -tags chaos -count=1 -timeout 60m -v ./chaos/ 2>&1 | tee ../chaos.out

chaos-shards: deps build ## the reliability suite against 8 shards (long; results in tools/chaos/results/chaos-shards.json, docs/RELIABILITY-shards.md)
	@set -o pipefail; cd tools && CHAOS_SHARDS=8 $(GO) test -tags chaos -count=1 -timeout 60m -v ./chaos/ 2>&1 | tee ../chaos-shards.out

bench: deps build ## benchmarks (long; regenerates docs/BENCHMARKS.md)
	cd tools && $(GO) run ./bench -out ../bench-results
	cd tools && $(GO) run ./bench/report -in ../bench-results -out ../docs

bench-quick: deps build ## benchmark smoke run (under 5 min)
	cd tools && $(GO) run ./bench -quick -out ../bench-results
	cd tools && $(GO) run ./bench/report -in ../bench-results -out /tmp/leasecron-bench-report

screenshots: deps ## regenerate docs/dashboard.png and docs/dashboard/*.png in headless Chromium
	cd tools && DASHBOARD_SCREENSHOTS=$(CURDIR)/docs/dashboard $(GO) test -count=1 -timeout 10m -run TestDashboardInChromium ./e2e/
	cp docs/dashboard/overview.png docs/dashboard.png

clean: ## remove build output
	rm -rf bin bench-results chaos.out chaos-shards.out test.log sim-long.txt
