# tierpush — common tasks. `make run` tries it, `make test` is the fast gate
# (at most 10 minutes), `make test-all` runs everything (CONTRIBUTING.md).
GO        ?= go
BIN       ?= bin/processor
FUZZTIME  ?= 60s
# How many times in a row `make test-faults` runs the fault suite.
FAULT_RUNS ?= 1
# The Jaeger v2 all-in-one the end-to-end tracing test runs, built once.
JAEGER_BIN ?= $(CURDIR)/.cache/jaeger

.PHONY: all build run test test-race test-side test-pacing-small test-all test-rest test-long test-short test-deploy test-pacing-grid test-faults test-examples test-jaeger lint lint-ci vet fmt fuzz clean bench-pacing jaeger

all: build

build:
	$(GO) build -o $(BIN) ./cmd/processor

# The processor on the embedded broker with two push simulators, a sample
# workload and a live status table that says where everything listens; logs
# go to $(DEV_DATA)/processor.log. Ctrl-C stops it cleanly and exits 0: on a
# terminal the binary runs as its own foreground job, so the interrupt
# reaches it alone and not make.
DEV_DATA ?= data
run: build
	@if [ -t 0 ]; then bash -c 'set -m; $(BIN) --dev --data-dir $(DEV_DATA) & fg %1 >/dev/null'; else exec $(BIN) --dev --data-dir $(DEV_DATA); fi

# The fast gate, at most 10 minutes on 2 cores with warm caches: vet; unit
# tests, fuzz seed corpora, the synctest pipeline tests and the subprocess
# crash and kcat tests with the race detector; a small pacing grid and tier 1
# ahead of a flood without it; the offline deploy checks. Long tests skip
# themselves here (testenv.Long); `make test-all` runs them. The race suite
# runs beside the rest (test-side), whose steps take one core while its last
# package, internal/pipeline, leaves one idle. Prints each part's duration
# and its own.
test:
	@start=$$(date +%s); rc=0; \
	$(MAKE) --no-print-directory -j2 -O test-race test-side || rc=$$?; \
	t=$$(( $$(date +%s) - start )); \
	if [ $$rc = 0 ]; then echo "make test: passed in $$((t / 60))m$$((t % 60))s"; else echo "make test: FAILED after $$((t / 60))m$$((t % 60))s"; fi; \
	exit $$rc

# TIMED prints how long the command after it took (tools/timed.sh).
TIMED = tools/timed.sh $@

test-race:
	$(TIMED) $(GO) test -race -count=1 -timeout 15m ./...

test-side:
	@$(MAKE) --no-print-directory vet && $(MAKE) --no-print-directory test-pacing-small && $(MAKE) --no-print-directory test-deploy

vet:
	$(TIMED) $(GO) vet ./...

# The small pacing part of `make test`, without the race detector, which
# slows it five- to tenfold: the replay (recorded answers in, decisions
# out), a token bucket at 500/s and 50 ms and a pool of 64 workers at
# 300 ms, one processor and three, on the simulator (PACING_CELLS); tier 1
# ahead of a flood at 5-50 ms per push, a healthy origin beside a failing
# one and beside a slow one that queues, and devices' 429s through Kafka.
PACING_CELLS ?= bucket/limit=500/latency=50ms/,workers=64/latency=300ms/
test-pacing-small:
	$(TIMED)-grid $(GO) test -count=1 -timeout 10m -run '^(TestReplay|TestGrid|TestGridQueueing)$$' ./internal/pacing -args -grid.cells '$(PACING_CELLS)'
	$(TIMED)-flood $(GO) test -count=1 -timeout 10m -run '^TestTier1BehindFlood$$/_(5|20|50)ms$$' ./internal/pipeline
	$(TIMED)-origins $(GO) test -count=1 -timeout 10m -run '^(TestBreaker|TestPerDeviceThrottling|TestSlowOriginBesideFast)$$' ./internal/pipeline

# Everything: `make test`, then the rest (test-rest).
test-all: test test-rest

# What `make test-all` adds to `make test`; .ci/run runs `make test` and
# then this: the long tests, the full pacing grid, the fault suite, the
# examples, the Jaeger end-to-end test and the linters.
test-rest: test-long test-pacing-grid test-faults test-examples test-jaeger lint-ci

# The tests that skip themselves in `make test` (testenv.Long): a rolling
# restart under load and one against a service that queues on a busy CPU,
# 20,000 tier-3 events beside tier 1, a limited origin
# offered four times its limit. LONG_TESTS names them so the rest of their
# package does not run twice. Without the race detector, which made them 8
# of the pipeline package's 11 minutes; the race suite runs the same code
# paths in its shorter tests.
LONG_TESTS ?= ^(TestRollingRestartUnderLoad|TestRollingRestartQueueing|TestTier1DuringTier3Flood|TestPacingRateLimitedOrigin)$$
test-long:
	TIERPUSH_TEST_ALL=1 $(GO) test -count=1 -timeout 30m -run '$(LONG_TESTS)' ./internal/pipeline

# The pacing grid (docs/pacing.md): every cell of internal/pacing's grid
# on the simulator (token buckets, worker pools that queue, strict and
# per-second origins, devices' throttling, limits that change, processors
# that join and leave), then its cells through Kafka and the simulator and
# every case of tier 1 ahead of a flood (internal/pipeline). Without the
# race detector. GRID_REPORT=docs/grid rewrites the grid's tables there.
test-pacing-grid:
	$(GO) test -count=1 -timeout 20m -run '^(TestGrid|TestGridQueueing|TestGridContended|TestGridStrict|TestGridDevices|TestGridChanges|TestGridMembership)$$' ./internal/pacing $(if $(GRID_REPORT),-args -grid.report $(abspath $(GRID_REPORT)))
	$(GO) test -count=1 -timeout 20m -run '^(TestPacingGridKafka|TestQueueingServiceKafka|TestTier1BehindFlood)$$' ./internal/pipeline

# Offline checks of the Dockerfile, docker-compose.yml and the Helm chart
# (a separate module: Helm, client-go and compose-go stay out of this one).
test-deploy:
	cd deploy/check && ../../$(TIMED)-vet $(GO) vet ./... && ../../$(TIMED) $(GO) test -count=1 -timeout 10m ./...

# The fault suite (test/faults, docs/reliability.md): a broker process and
# three processors in one group through SIGKILLs, a rolling restart, a broker
# restart, a push service outage, scale-out and poison records, and crash
# recovery on both group protocols, checking the ledger; prints the table.
# FAULT_RUNS=3 runs it three times in a row. Then the crash tests that run
# with it: the embedded broker killed three times, a member cut off from the
# coordinator while it sends, a broker of three removed.
test-faults:
	TIERPUSH_FAULTS=1 $(GO) test ./test/faults -run '^TestFaults$$' -count=$(FAULT_RUNS) -parallel 5 -v -timeout $$(( $(FAULT_RUNS) * 50 ))m
	TIERPUSH_FAULTS=1 $(GO) test -count=1 -v -timeout 20m -run '^TestCrashThreeKills$$' ./cmd/processor
	TIERPUSH_FAULTS=1 $(GO) test -count=1 -v -timeout 20m -run '^(TestZombieCommitsNothing|TestBrokerRemoved)$$' ./internal/pipeline

# The upstream examples (examples/): a producer and an outcome consumer in Go
# and in Node against the embedded broker; npm ci installs kafkajs first.
test-examples:
	cd examples/node && npm ci --no-audit --no-fund --silent
	TIERPUSH_TEST_ALL=1 $(GO) test -count=1 -timeout 5m ./examples

# The end-to-end tracing test against a real Jaeger v2 (fixed ports 4318 and
# 16686: one at a time on a machine).
test-jaeger: jaeger
	TIERPUSH_TEST_ALL=1 TIERPUSH_JAEGER_BIN=$(JAEGER_BIN) $(GO) test -count=1 -timeout 10m -run '^TestJaegerEndToEnd$$' ./telemetry

# Jaeger v2 from the Go module proxy, in its own module (tools/jaeger) with
# its replace for sarama. Its go.sum pins every hash; some of its
# dependencies are missing from the checksum database, hence GOSUMDB=off.
jaeger: $(JAEGER_BIN)

$(JAEGER_BIN): tools/jaeger/go.mod tools/jaeger/go.sum
	cd tools/jaeger && GOSUMDB=off $(GO) build -o $(JAEGER_BIN) github.com/jaegertracing/jaeger/cmd/jaeger

test-short:
	$(GO) test -short -count=1 ./...

# gofmt, and golangci-lint (.golangci.yml) when installed.
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; fi

# The linters of CI, built from the module proxy at the versions tools/lint
# pins: gofmt, golangci-lint with .golangci.yml, and govulncheck against the
# Go vulnerability database of golang.org/x/vulndb at VULNDB_VERSION (read
# from the module cache: the database's own site is not reachable from CI).
# tools/lint/govulncheck.sh fails on a called vulnerability of a required
# module and lists those of the standard library (VULN_STDLIB=fail fails on
# them too: they need a newer Go release).
LINT_BIN ?= $(CURDIR)/.cache/lint
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
lint-ci: vet $(LINT_BIN)/golangci-lint $(LINT_BIN)/govulncheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(LINT_BIN)/golangci-lint run ./...
	$(GO) mod download golang.org/x/vulndb@$(VULNDB_VERSION)
	tools/lint/govulncheck.sh $(LINT_BIN)/govulncheck $$($(GO) env GOMODCACHE)/golang.org/x/vulndb@$(VULNDB_VERSION)/data/osv

$(LINT_BIN)/golangci-lint: tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(LINT_BIN)/govulncheck: tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && $(GO) build -o $@ golang.org/x/vuln/cmd/govulncheck

fmt:
	gofmt -w $$(git ls-files '*.go')

# Each fuzz target for FUZZTIME (go test runs one fuzz target at a time).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/event
	$(GO) test -run '^$$' -fuzz '^FuzzCheckEndpoint$$' -fuzztime $(FUZZTIME) ./internal/netguard
	$(GO) test -run '^$$' -fuzz '^FuzzDecrypt$$' -fuzztime $(FUZZTIME) ./internal/pushsim
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMeta$$' -fuzztime $(FUZZTIME) ./topology
	$(GO) test -run '^$$' -fuzz '^FuzzParseOrigin$$' -fuzztime $(FUZZTIME) ./topology
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./topology
	$(GO) test -run '^$$' -fuzz '^FuzzOutcomeAppendJSON$$' -fuzztime $(FUZZTIME) ./topology
	$(GO) test -run '^$$' -fuzz '^FuzzParseRetryAfter$$' -fuzztime $(FUZZTIME) ./internal/dispatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/checkpoint

# Pacing against a push service that allows 500 requests/s, offered 2,000
# events/s for 60 s, with pacing on and off, on a fake clock: prints the
# 429 share and goodput of both and writes docs/img/pacing.{txt,svg}.
bench-pacing:
	$(GO) test ./internal/pipeline -run '^TestPacingRateLimitedOrigin$$' -count=1 -timeout 60m -v -pacing.report $(CURDIR)/docs/img

# The end-to-end benchmark (docs/benchmarks.md): the processor against
# `processor broker` and the push simulator on loopback, scenarios a-e, with
# the webpush-go-only ceiling. Writes bench/results/*.json and
# docs/img/bench-*.svg and prints the tables. BENCH_FLAGS adds flags, for
# example BENCH_FLAGS='--scenario a --events 20000'.
.PHONY: bench bench-cpu bench-cpu-30k
# BENCH_MD is the section of docs/benchmarks.md the run's tables replace
# (BENCH_MD= writes none, for a variant run).
BENCH_MD ?= --md docs/benchmarks.md --md-section all
bench:
	$(GO) run ./cmd/bench --scenario all $(BENCH_MD) $(BENCH_FLAGS)

# CPU per notification side by side (docs/benchmarks.md): scenarios a and b,
# 6,000 events each, against an HTTPS push simulator verifying 1 in 50, with
# the loop of 64 webpush-go senders and BullMQ + web-push on Redis (Redis
# from Debian, the npm packages into .cache/bench-peer, installed when
# missing) in the same run; prints the ratios, CPU s / 1k and allocs/event.
# Run it on a quiet machine.
BENCH_CPU_MD ?= --md docs/benchmarks.md --md-section cpu
bench-cpu:
	$(GO) run ./cmd/bench --scenario a,b --events 6000 --verify-every 50 --ceiling-senders 64 --peer bullmq $(BENCH_CPU_MD) $(BENCH_FLAGS)

# The same at steady state: scenario a, 30,000 events, five runs one after
# another (about 6 minutes); prints every run's tables, then each figure's
# median beside every run's value and the targets judged on the medians.
BENCH_CPU_30K_MD ?= --md docs/benchmarks.md --md-section cpu-30k
bench-cpu-30k:
	$(GO) run ./cmd/bench --scenario a --events 30000 --runs 5 --verify-every 50 --ceiling-senders 64 --peer bullmq $(BENCH_CPU_30K_MD) $(BENCH_FLAGS)

clean:
	rm -rf bin data
