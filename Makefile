# tierpush — common tasks. `make run` and `make test` are the two set-up commands.
GO        ?= go
BIN       ?= bin/processor
FUZZTIME  ?= 60s
# How many times in a row `make test-faults` runs the fault suite.
FAULT_RUNS ?= 1
# The Jaeger v2 all-in-one the end-to-end tracing test runs, built once.
JAEGER_BIN ?= $(CURDIR)/.cache/jaeger

.PHONY: all build run test test-short test-deploy test-pacing-grid test-faults lint vet fmt fuzz clean bench-pacing jaeger

all: build

build:
	$(GO) build -o $(BIN) ./cmd/processor

# The processor on the embedded broker with the push simulator, a sample
# workload and a live status table. Ctrl-C stops it cleanly.
run:
	$(GO) run ./cmd/processor --dev

# Every test, with the race detector: unit, fuzz seed corpora, the
# synctest pipeline tests, and the subprocess crash and kcat tests.
test: jaeger
	$(GO) vet ./...
	TIERPUSH_JAEGER_BIN=$(JAEGER_BIN) $(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) test-pacing-grid
	$(MAKE) test-deploy

# The pacing grid (internal/pacing TestGrid): limits 20-3,000 req/s x
# latencies 5-250 ms x 1 and 3 processors, and a limit that halves or
# doubles, on a fake clock; the same against origins that allow little
# burst (TestGridStrictOrigin: a twentieth of a second, a count per whole
# second), and an origin that throttles 5% of devices
# (TestGridDeviceThrottling); its cells through Kafka and the simulator, and
# tier 1 ahead of a flood (internal/pipeline). Without the race detector,
# which slows them five- to tenfold. GRID_REPORT=docs/img writes the
# grid's table and chart.
test-pacing-grid:
	$(GO) test -count=1 -timeout 10m -run '^(TestPacingGridKafka|TestTier1BehindFlood|TestBreaker)$$' ./internal/pipeline
	$(GO) test -count=1 -timeout 40m -run '^(TestGrid|TestGridStrictOrigin|TestGridDeviceThrottling)$$' ./internal/pacing $(if $(GRID_REPORT),-v -args -grid.report $(abspath $(GRID_REPORT)))

# Offline checks of the Dockerfile, docker-compose.yml and the Helm chart
# (a separate module: Helm, client-go and compose-go stay out of this one).
test-deploy:
	cd deploy/check && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

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

# Jaeger v2 from the Go module proxy, in its own module (tools/jaeger) with
# its replace for sarama. Its go.sum pins every hash; some of its
# dependencies are missing from the checksum database, hence GOSUMDB=off.
jaeger: $(JAEGER_BIN)

$(JAEGER_BIN): tools/jaeger/go.mod tools/jaeger/go.sum
	cd tools/jaeger && GOSUMDB=off $(GO) build -o $(JAEGER_BIN) github.com/jaegertracing/jaeger/cmd/jaeger

test-short:
	$(GO) test -short -count=1 ./...

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; fi

vet:
	$(GO) vet ./...

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
.PHONY: bench bench-cpu
bench:
	$(GO) run ./cmd/bench --scenario all $(BENCH_FLAGS)

# CPU per notification side by side (docs/benchmarks.md): scenarios a and b,
# 6,000 events each, against an HTTPS push simulator verifying 1 in 50, with
# the loop of 64 webpush-go senders and BullMQ + web-push on Redis (Redis
# from Debian, the npm packages into .cache/bench-peer, installed when
# missing) in the same run; prints the ratios, CPU s / 1k and allocs/event.
# Run it on a quiet machine.
bench-cpu:
	$(GO) run ./cmd/bench --scenario a,b --events 6000 --verify-every 50 --ceiling-senders 64 --peer bullmq $(BENCH_FLAGS)

clean:
	rm -rf bin data
