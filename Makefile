# outbox-relay: `make demo` runs it end to end, `make test` runs every test.
GO        ?= go
BIN       := bin/outbox-relay
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps test test-unit test-integration test-kafka fuzz demo bench bench-kafka bench-debezium vet clean release image

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

# The failpoints (internal/relay/failpoint.go) exist only under -tags
# failpoint, the build the integration harness runs; vet and test-unit check
# them there too. cmd/outbox-relay's TestShippedBinaryCarriesNoTestMachinery
# checks that the default build has none.
vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags failpoint ./internal/relay/

# Unit tests of the pure packages (no database, no broker) and the checks of
# deploy/; installs nothing. Tests that need promtool skip without it (the
# integration target requires it); tests driven by real time (session
# timeouts, throttled brokers) and the shipped-binary build check run under
# -tags integration only.
test-unit:
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags failpoint -run Failpoint ./internal/relay/

# Integration tests: the harness starts MariaDB in a scratch directory on its
# own port and an embedded Kafka broker per test (RELAY_TEST_KAFKA=host:port
# points them at a real broker instead). internal/itest runs in ITEST_SHARDS
# processes at once (internal/itest/shards.sh, each with its own MariaDB),
# beside the other integration packages.
ITEST_SHARDS ?= 3
INTEGRATION_PKGS := ./internal/mysqlitest/ ./internal/kititest/ ./internal/acltest/ ./deploy/... ./binlog/ ./internal/preflight/ ./internal/devdb/ ./internal/relay/ ./cmd/outbox-relay/
test-integration: deps
	@OUTBOX_RELAY_REQUIRE_PROMTOOL=1 $(GO) test -count=1 -tags integration -timeout 30m $(INTEGRATION_PKGS) & others=$$!; \
	SHARDS=$(ITEST_SHARDS) internal/itest/shards.sh; rc=$$?; \
	wait $$others || rc=1; exit $$rc

test: deps vet test-unit test-integration

# The integration and crash suites against Apache Kafka (fetched from Maven
# Central by deploy/dev/kafka.sh, cached): ITEST_SHARDS shards, each with a
# broker of its own in a fresh data directory (ports KAFKA_TEST_PORT + 4i and
# + 4i + 1), removed afterwards; then the least-privilege test
# (internal/acltest) against a broker with an ACL authorizer and SASL/SCRAM
# (KAFKA_SASL=1).
KAFKA_TEST_PORT ?= 29092
KAFKA_ACL_PORT ?= 29192
test-kafka: deps
	@SHARDS=$(ITEST_SHARDS) KAFKA_BASE_PORT=$(KAFKA_TEST_PORT) internal/itest/shards.sh || exit 1; \
	export KAFKA_SASL=1 KAFKA_PORT=$(KAFKA_ACL_PORT) KAFKA_DIR=$$(mktemp -d -t outbox-relay-kafka-acl-XXXXXX); \
	deploy/dev/kafka.sh start || exit 1; \
	RELAY_TEST_KAFKA_ACL=127.0.0.1:$(KAFKA_ACL_PORT),127.0.0.1:$$(($(KAFKA_ACL_PORT) + 2)) \
		$(GO) test -count=1 -tags integration -timeout 10m -run TestLeastPrivilegeKafka ./internal/acltest/; rc=$$?; \
	deploy/dev/kafka.sh stop; rm -rf "$$KAFKA_DIR"; exit $$rc

# Each target for FUZZTIME; `make test` runs their seed corpora only.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./router/ -run '^$$' -fuzz FuzzRoute -fuzztime $(FUZZTIME)
	$(GO) test ./binlog/ -run '^$$' -fuzz '^FuzzDecodeInsertRows$$' -fuzztime $(FUZZTIME)
	$(GO) test ./binlog/ -run '^$$' -fuzz '^FuzzFramer$$' -fuzztime $(FUZZTIME)

# Benchmarks (not part of make test): one Kafka transaction timed, catch-up
# throughput against a tuned naive baseline, latency, memory, CPU profile, on
# kfake and on Apache Kafka (deploy/dev/kafka.sh, started on a free port and
# stopped afterwards; BENCH_KAFKA=host:port uses a running one instead); the report
# goes to BENCHMARKS.md. Quick run: BENCH_N=100000 BENCH_ROUNDS=1
# BENCH_LATENCY_SECONDS=3. bench-kafka: Apache Kafka only.
BENCH_N ?= 1000000
BENCH_ROUNDS ?= 3
BENCH_LATENCY_SECONDS ?= 10
BENCH_BROKERS ?= kfake,kafka
BENCH_KAFKA ?=
BENCH_ARGS = -n $(BENCH_N) -rounds $(BENCH_ROUNDS) -latency-seconds $(BENCH_LATENCY_SECONDS) $(if $(BENCH_KAFKA),-kafka $(BENCH_KAFKA))
bench: deps
	$(GO) run ./bench $(BENCH_ARGS) -brokers $(BENCH_BROKERS) -out BENCHMARKS.md

bench-kafka: deps
	$(GO) run ./bench $(BENCH_ARGS) -brokers kafka -out BENCHMARKS.md

# bench-debezium (not in CI; needs Java 17+ and Maven): Debezium 3.6.1's MySQL
# connector + outbox EventRouter on Kafka Connect standalone
# (deploy/dev/debezium.sh, jars fetched from Maven Central and cached) side
# by side with the relay over the same binlog on Apache Kafka; prints the
# section kept by hand in BENCHMARKS.md ("Debezium side by side").
BENCH_DEBEZIUM_N ?= 500000
bench-debezium: deps
	deploy/dev/debezium.sh fetch
	$(GO) run ./bench -n $(BENCH_DEBEZIUM_N) -rounds $(BENCH_ROUNDS) -latency-seconds $(BENCH_LATENCY_SECONDS) $(if $(BENCH_KAFKA),-kafka $(BENCH_KAFKA)) -brokers kafka -sections debezium

# image builds the container image of deploy/compose/Dockerfile (static
# binary on distroless nonroot, uid 65532), the one the Kubernetes manifest
# runs: make image IMAGE=registry.example.com/outbox-relay:v0.1.0, then push it.
IMAGE ?= outbox-relay:$(VERSION)
image:
	docker build -f deploy/compose/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

demo: deps build
	$(GO) run ./examples/demo --relay $(BIN) $(DEMO_ARGS)

# release cross-builds static binaries (CGO off, -trimpath, the version
# stamped in) for linux/amd64, linux/arm64, darwin/amd64 and darwin/arm64
# into dist/, one .tar.gz each with LICENSE, README.md and CHANGELOG.md,
# and dist/SHA256SUMS. Nothing is fetched beyond Go modules.
# VERSION=v1.2.3 make release (default: git describe). -buildvcs=auto
# records the commit (`outbox-relay version` prints it) even under
# GOFLAGS=-buildvcs=false.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
release:
	@rm -rf dist && mkdir -p dist; \
	for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; name=outbox-relay-$(VERSION)-$$os-$$arch; \
		mkdir -p dist/$$name && \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=auto -ldflags "-s -w $(LDFLAGS)" -o dist/$$name/outbox-relay ./cmd/outbox-relay && \
		cp LICENSE README.md CHANGELOG.md dist/$$name/ && \
		tar -C dist -czf dist/$$name.tar.gz --owner=0 --group=0 --mtime='1970-01-01' $$name && \
		rm -rf dist/$$name || exit 1; \
		echo "built dist/$$name.tar.gz"; \
	done; \
	cd dist && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

clean:
	rm -rf bin dist
