# outbox-relay: `make demo` runs it end to end, `make test` runs every test.
GO        ?= go
BIN       := bin/outbox-relay
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit and its committer date (reproducible, unlike the build time)
# are stamped with the version: `outbox-relay version` prints all three.
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell git log -1 --format=%cI 2>/dev/null)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps deps-demo test test-unit test-integration test-kafka test-debezium fuzz fuzz-brief fuzz-run demo bench bench-kafka bench-audit bench-debezium vet clean release image image-docker

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outbox-relay

# docs regenerates docs/configuration.md (and internal/config/docs_gen.go)
# from the configuration's definitions, and the Helm chart's files made
# from them and from deploy/prometheus (internal/chartgen: the relay's
# schema in values.schema.json, the secret keys, files/alerts.yml); a test
# fails when any is stale.
.PHONY: docs
docs:
	$(GO) generate ./internal/config/

# deps installs what the tests need from Debian's packages when it is
# missing: MariaDB, promtool (package prometheus) for the alert rules, and
# the CA bundle (ca-certificates) that make image ships. deps-demo installs
# only what the demo needs: MariaDB.
deps: deps-demo
	@need=""; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	[ -s /etc/ssl/certs/ca-certificates.crt ] || need="$$need ca-certificates"; \
	if [ -n "$$need" ]; then \
		echo "installing from apt:$$need"; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$need; \
	fi

deps-demo:
	@{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || { \
		echo "installing from apt: mariadb-server mariadb-client"; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends mariadb-server mariadb-client; }

# The failpoints (internal/relay/failpoint.go) exist only under -tags
# failpoint, the build the integration harness runs; vet and test-unit check
# them there too. cmd/outbox-relay's TestShippedBinaryCarriesNoTestMachinery
# checks that the default build has none.
vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags failpoint ./internal/relay/

# Unit tests of the pure packages (no database, no broker) and the checks of
# deploy/; installs nothing, and `go test ./...` alone takes under a minute.
# Tests driven by real time (session timeouts, throttled brokers), promtool's
# rule tests, the release and image build (deploy/release_test.go, minutes on
# a cold build cache) and the shipped-binary build check run under -tags
# integration only (test-integration).
test-unit:
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -count=1 -tags failpoint -run Failpoint ./internal/relay/

# Integration tests: the harness starts MariaDB in a scratch directory on its
# own port and an embedded Kafka broker per test (RELAY_TEST_KAFKA=host:port
# points them at a real broker instead). internal/itest runs in ITEST_SHARDS
# processes at once (internal/itest/shards.sh, each with its own MariaDB),
# beside the other integration packages.
ITEST_SHARDS ?= 3
INTEGRATION_PKGS := ./internal/mysqlitest/ ./internal/kititest/ ./internal/acltest/ ./deploy/... ./binlog/ ./internal/preflight/ ./internal/devdb/ ./internal/relay/ ./cmd/outbox-relay/ ./examples/demo/ ./internal/ha/ ./source/ ./schema/ ./internal/dbzitest/
test-integration: deps
	@OUTBOX_RELAY_REQUIRE_PROMTOOL=1 $(GO) test -count=1 -tags integration -timeout 30m $(INTEGRATION_PKGS) & others=$$!; \
	SHARDS=$(ITEST_SHARDS) internal/itest/shards.sh; rc=$$?; \
	wait $$others || rc=1; exit $$rc

test: deps vet test-unit test-integration fuzz-brief

# The integration and crash suites against Apache Kafka (fetched from Maven
# Central by deploy/dev/kafka.sh, cached): internal/itest's tests whose
# subject is the broker's behaviour (those marked BrokerOnlyAsSink run on
# kfake only: docs/testing.md; ITEST_KAFKA_ALL=1 runs every one here too) in
# ITEST_SHARDS shards, each with a broker of its own in a fresh data
# directory (ports KAFKA_TEST_PORT + 4i and + 4i + 1), removed afterwards;
# beside them the kit's tests (below) and the least-privilege test
# (internal/acltest) against a broker with an ACL authorizer and SASL/SCRAM
# (KAFKA_SASL=1), each on a broker of its own; then test-debezium. Every
# suite runs to its end; the target fails when one failed.
KAFKA_TEST_PORT ?= 29092
KAFKA_ACL_PORT ?= 29192
KAFKA_KIT_PORT ?= 29292
ITEST_KAFKA_ALL ?=
# The kit's tests whose point is what a broker stores and answers (the
# audit's reads by timestamp, the relay's spans with the offsets they name)
# run against Apache Kafka too, on a broker of their own.
KIT_KAFKA_RUN := TestAudit|TestBackgroundAudit|TestTraceContext|TestRelaySpan
test-kafka: deps
	@deploy/dev/kafka.sh fetch && deploy/dev/debezium.sh fetch || exit 1; \
	rc=0; $(MAKE) --no-print-directory -j2 --output-sync=target test-kafka-itest test-kafka-kit-acl || rc=1; \
	$(MAKE) --no-print-directory test-debezium || rc=1; exit $$rc

# test-kafka's parts that run at once (not meant to be called alone).
.PHONY: test-kafka-itest test-kafka-kit-acl
test-kafka-itest:
	@SHARDS=$(ITEST_SHARDS) KAFKA_BASE_PORT=$(KAFKA_TEST_PORT) $(if $(ITEST_KAFKA_ALL),RELAY_TEST_KAFKA_ALL=1) internal/itest/shards.sh

test-kafka-kit-acl:
	@export KAFKA_PORT=$(KAFKA_KIT_PORT) KAFKA_DIR=$$(mktemp -d -t outbox-relay-kafka-kit-XXXXXX); \
	deploy/dev/kafka.sh start || exit 1; \
	RELAY_TEST_KAFKA=127.0.0.1:$(KAFKA_KIT_PORT) $(GO) test -count=1 -tags integration -timeout 10m -run '$(KIT_KAFKA_RUN)' ./internal/kititest/; rc=$$?; \
	deploy/dev/kafka.sh stop; rm -rf "$$KAFKA_DIR"; \
	export KAFKA_SASL=1 KAFKA_PORT=$(KAFKA_ACL_PORT) KAFKA_DIR=$$(mktemp -d -t outbox-relay-kafka-acl-XXXXXX); \
	deploy/dev/kafka.sh start || exit 1; \
	RELAY_TEST_KAFKA_ACL=127.0.0.1:$(KAFKA_ACL_PORT),127.0.0.1:$$(($(KAFKA_ACL_PORT) + 2)) \
		$(GO) test -count=1 -tags integration -timeout 10m -run TestLeastPrivilegeKafka ./internal/acltest/ || rc=1; \
	deploy/dev/kafka.sh stop; rm -rf "$$KAFKA_DIR"; exit $$rc

# The switch from Debezium (checkpoint set --from-debezium) end to end
# (internal/dbzitest): Debezium 3.6.1's MySQL connector with the outbox
# EventRouter on Kafka Connect distributed and standalone
# (deploy/dev/debezium.sh; jars fetched from Maven Central with Maven and
# cached, as Kafka's), stopped, the relay started from the translated
# position; on a broker of its own (port KAFKA_DBZ_PORT). make test-kafka
# runs it last. Needs Java 17+ and mvn; about three minutes.
KAFKA_DBZ_PORT ?= 29392
test-debezium: deps
	@deploy/dev/debezium.sh fetch || exit 1; \
	export KAFKA_PORT=$(KAFKA_DBZ_PORT) KAFKA_DIR=$$(mktemp -d -t outbox-relay-kafka-dbz-XXXXXX); \
	deploy/dev/kafka.sh start || exit 1; \
	RELAY_TEST_KAFKA=127.0.0.1:$(KAFKA_DBZ_PORT) RELAY_TEST_DEBEZIUM=1 \
		$(GO) test -count=1 -tags integration -timeout 10m ./internal/dbzitest/; rc=$$?; \
	deploy/dev/kafka.sh stop; rm -rf "$$KAFKA_DIR"; exit $$rc

# The fuzz targets as package:name:executions, the executions sized to a
# few seconds each on a 2-core machine. `go test` runs their seed corpora
# only; `make test` fuzzes each for its executions (fuzz-brief), `make fuzz`
# for FUZZ_SCALE times that many, or for FUZZTIME (a duration) when given.
# A budget in executions, not time: Go 1.26's fuzzing coordinator can fail a
# run that is ending on time with "context deadline exceeded" and no crasher
# when its workers are slow to stop (golang/go#75804, fixed in Go 1.27), as a
# loaded CI host makes them.
FUZZ_TARGETS := \
	./router/:FuzzRoute:40000 \
	./router/:FuzzRouteRemembersNoTopicAFreshRouterWouldNotGive:15000 \
	./router/:FuzzTraceHeaders:60000 \
	./binlog/:FuzzDecodeInsertRows:3000 \
	./binlog/:FuzzFramer:3000 \
	./binlog/:FuzzHotPathRowsEvent:8000 \
	./binlog/:FuzzCheckEvent:15000 \
	./binlog/:FuzzRedactStatementHidesTheSecret:20000 \
	./internal/debezium/:FuzzDecodeOffsetFile:30000
FUZZ_SCALE ?= 10
FUZZTIME ?=
fuzz:
	@$(MAKE) --no-print-directory fuzz-run FUZZ_MUL=$(FUZZ_SCALE)

fuzz-brief:
	@$(MAKE) --no-print-directory fuzz-run FUZZ_MUL=1 FUZZTIME=

fuzz-run:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
		budget="$(FUZZTIME)"; [ -n "$$budget" ] || budget=$$((n * $(FUZZ_MUL)))x; \
		echo "$(GO) test $$pkg -run '^\$$' -fuzz '^$$name\$$' -fuzztime $$budget"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget; \
	done

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

# bench-audit: publishes BENCH_AUDIT_N outbox rows and times `outbox-relay
# audit` over them (rows/s, peak RSS); prints its section, kept by hand in
# BENCHMARKS.md. BENCH_AUDIT_N=100000 for a quick run.
BENCH_AUDIT_N ?= 1000000
bench-audit: deps
	$(GO) run ./bench -sections audit -audit-n $(BENCH_AUDIT_N) $(if $(BENCH_KAFKA),-kafka $(BENCH_KAFKA)) -brokers $(BENCH_BROKERS)

# bench-debezium (not in CI; needs Java 17+ and Maven): Debezium 3.6.1's MySQL
# connector + outbox EventRouter on Kafka Connect standalone
# (deploy/dev/debezium.sh, jars fetched from Maven Central and cached) side
# by side with the relay over the same binlog on Apache Kafka; prints the
# section kept by hand in BENCHMARKS.md ("Debezium side by side").
BENCH_DEBEZIUM_N ?= 500000
bench-debezium: deps
	deploy/dev/debezium.sh fetch
	$(GO) run ./bench -n $(BENCH_DEBEZIUM_N) -rounds $(BENCH_ROUNDS) -latency-seconds $(BENCH_LATENCY_SECONDS) $(if $(BENCH_KAFKA),-kafka $(BENCH_KAFKA)) -brokers kafka -sections debezium

# image-docker builds the container image of deploy/compose/Dockerfile with
# a Docker daemon (static binary on distroless nonroot, uid 65532):
# make image-docker IMAGE=registry.example.com/outbox-relay:v0.1.0.
IMAGE ?= outbox-relay:$(VERSION)
image-docker:
	docker build -f deploy/compose/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# demo runs a built binary, not `go run` (which exits 1 on Ctrl-C whatever
# the demo returns, and make then reports an error). It picks free ports;
# DEMO_ARGS="--db-port 3307 --kafka 127.0.0.1:19092" chooses them.
demo: deps-demo build
	$(GO) build -o bin/demo ./examples/demo
	bin/demo --relay $(BIN) $(DEMO_ARGS)

# release cross-builds static binaries (CGO off, -trimpath, version, commit
# and commit date stamped in) for linux/amd64, linux/arm64, darwin/amd64 and
# darwin/arm64 into DIST, one .tar.gz each with LICENSE, README.md and
# CHANGELOG.md, a CycloneDX SBOM (JSON) beside each of the modules built
# into its binary with their licenses (cyclonedx-gomod bin -licenses: read
# from the binary's build information, so it lists what was linked; pinned,
# from the Go module proxy, installed into bin/tools), the image and its
# SBOM (make image), SHA256SUMS of them all and an in-toto/SLSA provenance
# statement naming each with its sha256 (tools/release). Everything is
# reproducible: times are the commit's (SOURCE_DATE_EPOCH), archives sorted
# with fixed owners, modes and times, gzip without a timestamp; two runs
# give the same SHA256SUMS. It replaces only its own files in DIST. Nothing
# is fetched beyond Go modules. docs/releasing.md: how a release is cut.
# VERSION=v1.2.3 make release (default: git describe).
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST ?= dist
# The binaries and their SBOMs, made once per platform for the archives
# and the image.
BUILD ?= bin/release/$(VERSION)
CYCLONEDX_GOMOD ?= github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
TOOLS := $(abspath bin/tools)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
export SOURCE_DATE_EPOCH
# Who builds (the provenance's runDetails.builder.id): a maintainer's
# machine unless CI says otherwise.
BUILDER_ID ?= https://github.com/outbox-relay/outbox-relay/blob/main/docs/releasing.md\#local
RELEASE_BUILD = CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)"

$(TOOLS)/cyclonedx-gomod:
	GOBIN=$(TOOLS) $(GO) install $(CYCLONEDX_GOMOD)

# A platform's binary (always rebuilt: the sources may have changed) and
# its SBOM, completed by tools/release (the relay's license, the time).
$(BUILD)/%/outbox-relay: FORCE
	@os=$(word 1,$(subst -, ,$*)); arch=$(word 2,$(subst -, ,$*)); \
	$(RELEASE_BUILD) -o $@ ./cmd/outbox-relay

# GOOS and GOARCH: cyclonedx-gomod writes go env's into the purls, not the
# binary's. Licenses are detected from the module cache and reported as
# evidence (the detector mistakes some: go-mysql's MIT for the BSD license
# of a file it carries); the relay's and the standard library's are set.
$(BUILD)/%/outbox-relay.cdx.json: $(BUILD)/%/outbox-relay $(TOOLS)/cyclonedx-gomod
	@GOOS=$(word 1,$(subst -, ,$*)) GOARCH=$(word 2,$(subst -, ,$*)) GOPROXY=off \
		$(TOOLS)/cyclonedx-gomod bin -json -std -licenses -noserial -notimestamp \
		-version $(VERSION) -output $@ $< 2>$@.log || { cat $@.log; exit 1; }; \
	$(GO) run ./tools/release sbom -time $(DATE) -license Apache-2.0 $@

release: image $(foreach p,$(RELEASE_PLATFORMS),$(BUILD)/$(subst /,-,$(p))/outbox-relay.cdx.json)
	@files=""; \
	for p in $(RELEASE_PLATFORMS); do \
		d=$(BUILD)/$$(echo $$p | tr / -); name=outbox-relay-$(VERSION)-$$(echo $$p | tr / -); \
		$(GO) run ./tools/release archive -out $(DIST)/$$name.tar.gz -prefix $$name -time $(DATE) \
			$$d/outbox-relay LICENSE README.md CHANGELOG.md && \
		cp $$d/outbox-relay.cdx.json $(DIST)/$$name.cdx.json || exit 1; \
		files="$$files $$name.tar.gz $$name.cdx.json"; \
	done; \
	files="$$files outbox-relay-$(VERSION)-oci.tar outbox-relay-$(VERSION)-oci.cdx.json"; \
	$(GO) run ./tools/release sums -dir $(DIST) $$files && \
	$(GO) run ./tools/release provenance -dir $(DIST) -out $(DIST)/outbox-relay-$(VERSION).intoto.json \
		-version $(VERSION) -commit $(COMMIT) -source $(IMAGE_SOURCE) -builder $(BUILDER_ID) \
		-image-ref $(IMAGE_REPO):$(VERSION) -dependency ca-bundle=$(CA_BUNDLE) \
		-param "release_platforms=$(RELEASE_PLATFORMS)" -param "image_platforms=$(IMAGE_PLATFORMS)" \
		-param image_repo=$(IMAGE_REPO) -param commit_date=$(DATE) $$files && \
	echo "provenance: $(DIST)/outbox-relay-$(VERSION).intoto.json"

.PHONY: FORCE
FORCE:

# image builds the multi-arch container image without a Docker daemon
# (tools/ociimage, go-containerregistry): static binaries for
# IMAGE_PLATFORMS, each on an empty base with only Debian's CA bundle
# (CA_BUNDLE, package ca-certificates), /etc/passwd with the nonroot user
# 65532 and /tmp; no shell; OCI labels (source, version, revision, created,
# licenses). It leaves $(DIST)/outbox-relay-$(VERSION)-oci.tar, an OCI
# archive whose index names the image $(IMAGE_REPO):$(VERSION) (podman load
# and docker load take that name; `skopeo copy oci-archive:FILE
# docker://REGISTRY/outbox-relay:VERSION` pushes it: docs/releasing.md),
# and its CycloneDX SBOM $(DIST)/outbox-relay-$(VERSION)-oci.cdx.json.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_SOURCE ?= https://github.com/outbox-relay/outbox-relay
IMAGE_REPO ?= ghcr.io/outbox-relay/outbox-relay
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image: $(foreach p,$(IMAGE_PLATFORMS),$(BUILD)/$(subst /,-,$(p))/outbox-relay.cdx.json)
	@mkdir -p $(DIST); args=""; \
	for p in $(IMAGE_PLATFORMS); do \
		d=$(BUILD)/$$(echo $$p | tr / -); \
		args="$$args -binary $$p=$$d/outbox-relay -sbom $$p=$$d/outbox-relay.cdx.json"; \
	done; \
	$(GO) run ./tools/ociimage $$args -ca-bundle $(CA_BUNDLE) -version $(VERSION) -revision $(COMMIT) \
		-created $(DATE) -source $(IMAGE_SOURCE) -repo $(IMAGE_REPO) \
		-out $(DIST)/outbox-relay-$(VERSION)-oci.tar -sbom-out $(DIST)/outbox-relay-$(VERSION)-oci.cdx.json

# kept for the image and the archives of one run (make would delete them as
# intermediate files)
.SECONDARY: $(foreach p,$(sort $(RELEASE_PLATFORMS) $(IMAGE_PLATFORMS)),$(BUILD)/$(subst /,-,$(p))/outbox-relay)

clean:
	rm -rf bin dist
