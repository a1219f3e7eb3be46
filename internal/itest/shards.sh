#!/usr/bin/env bash
# Runs the integration tests of internal/itest in shards at once: one test
# binary, SHARDS processes, each with its own scratch MariaDB and its own
# brokers, the tests dealt out round-robin in source order (so the long
# shape and standby tests spread). Most of the suite waits (session
# timeouts, restarts, kill -9 and takeover), so shards overlap well.
#
#   internal/itest/shards.sh                 # kfake: an embedded broker per test
#   KAFKA_BASE_PORT=29092 internal/itest/shards.sh
#       # Apache Kafka: each shard starts its own (deploy/dev/kafka.sh on
#       # ports BASE+4i and BASE+4i+1, a scratch directory), so a test that
#       # restarts or stops its broker disturbs only its own shard.
#
# With RELAY_TEST_KAFKA set (one broker of the caller's) it runs one shard.
#
# Environment: SHARDS (default 2), ITEST_TIMEOUT (default 30m), ITEST_RUN (a
# -test.run pattern to narrow the tests; default all). Each shard's output
# goes to a log that is printed when the shard fails. Exit status: 0 when
# every shard passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
SHARDS=${SHARDS:-2}
ITEST_TIMEOUT=${ITEST_TIMEOUT:-30m}
ITEST_RUN=${ITEST_RUN:-.}
KAFKA_BASE_PORT=${KAFKA_BASE_PORT:-}
if [ -n "${RELAY_TEST_KAFKA:-}" ] && [ -z "$KAFKA_BASE_PORT" ] && [ "$SHARDS" != 1 ]; then
  # One broker named from outside: shards would restart it under each other.
  echo "itest: RELAY_TEST_KAFKA names one broker: one shard"
  SHARDS=1
fi

work=$(mktemp -d -t outbox-relay-itest-shards-XXXXXX)
kafka_dirs=()
cleanup() {
  for d in "${kafka_dirs[@]}"; do
    KAFKA_DIR=$d KAFKA_PORT=$(cat "$d/port") deploy/dev/kafka.sh stop >/dev/null 2>&1
    rm -rf "$d"
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "itest: building the test binary"
go test -c -tags integration -o "$work/itest.test" ./internal/itest/ || exit 1
mapfile -t tests < <(cd internal/itest && "$work/itest.test" -test.list "$ITEST_RUN" | grep '^Test')
if [ ${#tests[@]} -eq 0 ]; then echo "itest: no test matches $ITEST_RUN" >&2; exit 1; fi

if [ -n "$KAFKA_BASE_PORT" ]; then
  for i in $(seq 0 $((SHARDS - 1))); do
    d=$(mktemp -d -t outbox-relay-kafka-shard-XXXXXX)
    port=$((KAFKA_BASE_PORT + 4 * i))
    echo "$port" > "$d/port"
    kafka_dirs+=("$d")
    KAFKA_DIR=$d KAFKA_PORT=$port deploy/dev/kafka.sh start || exit 1
  done
fi

start=$(date +%s)
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  names=()
  for j in "${!tests[@]}"; do
    if [ $((j % SHARDS)) -eq "$i" ]; then names+=("${tests[$j]}"); fi
  done
  pattern="^($(IFS='|'; echo "${names[*]}"))\$"
  (
    if [ -n "$KAFKA_BASE_PORT" ]; then
      d=${kafka_dirs[$i]}
      export KAFKA_DIR=$d KAFKA_PORT=$(cat "$d/port")
      export RELAY_TEST_KAFKA=127.0.0.1:$KAFKA_PORT RELAY_TEST_KAFKA_RESTART="deploy/dev/kafka.sh restart" \
        RELAY_TEST_KAFKA_CTL=deploy/dev/kafka.sh
    fi
    cd internal/itest && exec "$work/itest.test" -test.run "$pattern" -test.timeout "$ITEST_TIMEOUT"
  ) > "$work/shard$i.log" 2>&1 &
  pids+=($!)
  echo "itest: shard $i: ${#names[@]} tests"
done

rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "itest: shard $i passed"
  else
    rc=1
    # Without -test.v the binary prints only the failing tests' output.
    echo "itest: shard $i FAILED:"
    cat "$work/shard$i.log"
  fi
done
echo "itest: ${#tests[@]} tests in $SHARDS shards, $(($(date +%s) - start)) s"
exit $rc
