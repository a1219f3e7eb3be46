# outbox-relay: `make demo` runs it end to end, `make test` runs every test.
GO        ?= go
BIN       := bin/outbox-relay
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps test test-unit test-integration test-kafka fuzz demo bench vet clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outbox-relay

# deps installs what the tests need from Debian's packages when it is
# missing: MariaDB, and promtool (package prometheus) for the alert rules.
deps:
	@need=""; \
	{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || need="$$need mariadb-server mariadb-client"; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	if [ -n "$$need" ]; then \
		echo "installing from apt:$$need"; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$need; \
	fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...

# Unit tests of the pure packages (no database, no broker) and the checks of
# deploy/ (promtool required).
test-unit: deps
	OUTBOX_RELAY_REQUIRE_PROMTOOL=1 $(GO) test -count=1 ./...

# Integration tests: the harness starts MariaDB in a scratch directory on its
# own port and an embedded Kafka broker per test (RELAY_TEST_KAFKA=host:port
# points them at a real broker instead).
test-integration: deps
	$(GO) test -count=1 -tags integration -timeout 20m ./internal/itest/

test: deps vet test-unit test-integration

# The integration and crash suites against Apache Kafka (fetched from Maven
# Central by deploy/dev/kafka.sh, cached), in a fresh data directory that is
# removed afterwards.
KAFKA_TEST_PORT ?= 29092
test-kafka: deps
	@export KAFKA_PORT=$(KAFKA_TEST_PORT) KAFKA_DIR=$$(mktemp -d -t outbox-relay-kafka-XXXXXX); \
	deploy/dev/kafka.sh start || exit 1; \
	RELAY_TEST_KAFKA=127.0.0.1:$(KAFKA_TEST_PORT) RELAY_TEST_KAFKA_RESTART="deploy/dev/kafka.sh restart" \
		$(GO) test -count=1 -tags integration -timeout 20m ./internal/itest/; rc=$$?; \
	deploy/dev/kafka.sh stop; rm -rf "$$KAFKA_DIR"; exit $$rc

fuzz:
	$(GO) test ./router/ -run '^$$' -fuzz FuzzRoute -fuzztime 30s

# Benchmarks (not part of make test): catch-up throughput against a naive
# baseline, latency, memory, CPU profile; the report goes to BENCHMARKS.md.
# BENCH_N=100000 BENCH_ROUNDS=1 for a quick run.
BENCH_N ?= 1000000
BENCH_ROUNDS ?= 3
bench: deps
	$(GO) run ./bench -n $(BENCH_N) -rounds $(BENCH_ROUNDS) -out BENCHMARKS.md

demo: deps build
	$(GO) run ./examples/demo --relay $(BIN) $(DEMO_ARGS)

clean:
	rm -rf bin
