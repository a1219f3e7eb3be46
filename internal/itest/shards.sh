#!/usr/bin/env bash
# Runs the integration tests of internal/itest in shards at once: one test
# binary, SHARDS processes, each with its own scratch MariaDB and its own
# brokers. Tests are dealt out by how long each took (internal/itest/durations:
# seconds on kfake and on Apache Kafka, measured by this script), longest
# first, each to the shard with the least time so far; a test not listed
# counts as the median. Most of the suite waits (session timeouts, restarts,
# kill -9 and takeover), so shards overlap well.
#
#   internal/itest/shards.sh                 # kfake: an embedded broker per test
#   KAFKA_BASE_PORT=29092 internal/itest/shards.sh
#       # Apache Kafka: each shard starts its own (deploy/dev/kafka.sh on
#       # ports BASE+4i and BASE+4i+1, a scratch directory), so a test that
#       # restarts or stops its broker disturbs only its own shard. Tests
#       # marked BrokerOnlyAsSink are skipped there (docs/testing.md), unless
#       # RELAY_TEST_KAFKA_ALL=1.
#
# With RELAY_TEST_KAFKA set (one broker of the caller's) it runs one shard.
#
# Environment: SHARDS (default 2), ITEST_TIMEOUT (default 30m), ITEST_RUN (a
# -test.run pattern to narrow the tests; default all), ITEST_DURATIONS (the
# durations file), ITEST_RECORD=1 (write the durations measured by this run
# into it: a test's column for this broker, kfake or kafka). Each shard's
# output goes to a log; the output of the tests that failed is printed (the
# whole end of the log when the binary itself failed). It prints each
# shard's time and the slowest tests. Exit status: 0 when every shard passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
SHARDS=${SHARDS:-2}
ITEST_TIMEOUT=${ITEST_TIMEOUT:-30m}
ITEST_RUN=${ITEST_RUN:-.}
ITEST_DURATIONS=${ITEST_DURATIONS:-internal/itest/durations}
KAFKA_BASE_PORT=${KAFKA_BASE_PORT:-}
if [ -n "${RELAY_TEST_KAFKA:-}" ] && [ -z "$KAFKA_BASE_PORT" ] && [ "$SHARDS" != 1 ]; then
  # One broker named from outside: shards would restart it under each other.
  echo "itest: RELAY_TEST_KAFKA names one broker: one shard"
  SHARDS=1
fi
column=2 # kfake's seconds
if [ -n "$KAFKA_BASE_PORT" ] || [ -n "${RELAY_TEST_KAFKA:-}" ]; then column=3; fi

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

echo "itest: building the test binary and the relay"
go test -c -tags integration -o "$work/itest.test" ./internal/itest/ || exit 1
# The relay every shard runs (RELAY_TEST_BINARY), built once.
go build -tags failpoint -o "$work/outbox-relay" ./cmd/outbox-relay || exit 1
export RELAY_TEST_BINARY=$work/outbox-relay
(cd internal/itest && "$work/itest.test" -test.list "$ITEST_RUN") | grep '^Test' > "$work/tests"
if [ ! -s "$work/tests" ]; then echo "itest: no test matches $ITEST_RUN" >&2; exit 1; fi

if [ -n "$KAFKA_BASE_PORT" ]; then
  # The brokers start at once (each one's JVM start and KRaft format take
  # seconds); the download, when one is needed, happens once before.
  deploy/dev/kafka.sh fetch || exit 1
  starting=()
  for i in $(seq 0 $((SHARDS - 1))); do
    d=$(mktemp -d -t outbox-relay-kafka-shard-XXXXXX)
    echo $((KAFKA_BASE_PORT + 4 * i)) > "$d/port"
    kafka_dirs+=("$d")
    KAFKA_DIR=$d KAFKA_PORT=$(cat "$d/port") deploy/dev/kafka.sh start &
    starting+=($!)
  done
  for pid in "${starting[@]}"; do wait "$pid" || exit 1; done
fi

# Longest first, each to the shard with the least planned time (ties: the
# lower shard). Output: shard, test, planned seconds.
awk -v shards="$SHARDS" -v col="$column" '
  FILENAME == ARGV[1] { if ($1 ~ /^Test/ && $col != "-") known[$1] = $col + 0; next }
  { tests[++n] = $1 }
  END {
    m = 0
    for (i = 1; i <= n; i++) if (tests[i] in known) vals[++m] = known[tests[i]]
    median = 10
    if (m > 0) {
      # insertion sort: a few hundred values
      for (i = 2; i <= m; i++) { v = vals[i]; for (j = i - 1; j >= 1 && vals[j] > v; j--) vals[j + 1] = vals[j]; vals[j + 1] = v }
      median = vals[int((m + 1) / 2)]
    }
    for (i = 1; i <= n; i++) d[i] = (tests[i] in known) ? known[tests[i]] : median
    for (i = 2; i <= n; i++) { t = tests[i]; v = d[i]; for (j = i - 1; j >= 1 && d[j] < v; j--) { tests[j + 1] = tests[j]; d[j + 1] = d[j] } tests[j + 1] = t; d[j + 1] = v }
    for (s = 0; s < shards; s++) load[s] = 0
    for (i = 1; i <= n; i++) {
      best = 0
      for (s = 1; s < shards; s++) if (load[s] < load[best]) best = s
      load[best] += d[i]
      print best, tests[i], d[i]
    }
  }' <( [ -f "$ITEST_DURATIONS" ] && cat "$ITEST_DURATIONS" ) "$work/tests" > "$work/plan"

start=$(date +%s)
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  mapfile -t names < <(awk -v s="$i" '$1 == s { print $2 }' "$work/plan")
  planned=$(awk -v s="$i" '$1 == s { t += $3 } END { printf "%d", t }' "$work/plan")
  if [ ${#names[@]} -eq 0 ]; then continue; fi
  pattern="^($(IFS='|'; echo "${names[*]}"))\$"
  (
    if [ -n "$KAFKA_BASE_PORT" ]; then
      d=${kafka_dirs[$i]}
      export KAFKA_DIR=$d KAFKA_PORT=$(cat "$d/port")
      export RELAY_TEST_KAFKA=127.0.0.1:$KAFKA_PORT RELAY_TEST_KAFKA_RESTART="deploy/dev/kafka.sh restart" \
        RELAY_TEST_KAFKA_CTL=deploy/dev/kafka.sh
    fi
    cd internal/itest && "$work/itest.test" -test.v -test.run "$pattern" -test.timeout "$ITEST_TIMEOUT"
    rc=$?
    echo $(($(date +%s) - start)) > "$work/shard$i.took"
    exit $rc
  ) > "$work/shard$i.log" 2>&1 &
  pids[i]=$!
  echo "itest: shard $i: ${#names[@]} tests, ${planned} s planned"
done

# failed prints what a shard's verbose log says about the tests that did
# not pass: each failed test's output, and the lines outside any test (the
# binary's own failure: a panic, the timeout's goroutine dump).
failed() {
  awk '
    /^=== RUN   Test[^\/]*$/ { flush(); buf = $0 "\n"; intest = 1; next }
    /^--- (PASS|SKIP): Test/ { buf = ""; intest = 0; skipping = 1; next }
    /^--- FAIL: Test/ { printf "%s%s\n", buf, $0; buf = ""; intest = 0; skipping = 0; next }
    /^(PASS|FAIL|ok  |FAIL\t)/ { skipping = 0 }
    intest { buf = buf $0 "\n"; next }
    skipping && /^    / { next }
    { skipping = 0; print }
    function flush() { if (buf != "") printf "%s", buf; buf = "" }
    END { flush() }' "$1"
}

rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "itest: shard $i passed in $(cat "$work/shard$i.took") s"
  else
    rc=1
    echo "itest: shard $i FAILED after $(cat "$work/shard$i.took" 2>/dev/null || echo ?) s:"
    failed "$work/shard$i.log"
  fi
done
echo "itest: $(wc -l < "$work/tests") tests in $SHARDS shards, $(($(date +%s) - start)) s"

# What each test took (seconds, as the test binary reports it).
cat "$work"/shard*.log | sed -n 's/^--- \(PASS\|FAIL\|SKIP\): \(Test[^ ]*\) (\([0-9.]*\)s)$/\2 \3/p' > "$work/took"
echo "itest: the slowest tests:"
sort -k2 -rn "$work/took" | head -n 12 | awk '{ printf "  %7.1f s  %s\n", $2, $1 }'
if [ "${ITEST_RECORD:-}" = 1 ]; then
  tmp=$(mktemp)
  # A test no longer in the binary is dropped after a run of all of them;
  # one measured for the first time is "-" (unknown) for the other broker.
  awk -v col="$column" -v all="$([ "$ITEST_RUN" = . ] && echo 1)" '
    FILENAME == ARGV[1] { took[$1] = $2; next }
    FILENAME == ARGV[2] { listed[$1] = 1; next }
    /^#/ { print; next }
    $1 ~ /^Test/ { if (all && !($1 in listed)) next; seen[$1] = 1; if ($1 in took) $col = took[$1]; print; next }
    END { for (t in took) if (!(t in seen)) print t, col == 2 ? took[t] : "-", col == 3 ? took[t] : "-" }
  ' "$work/took" "$work/tests" <( [ -f "$ITEST_DURATIONS" ] && cat "$ITEST_DURATIONS" ) > "$tmp"
  { grep '^#' "$tmp"; grep -v '^#' "$tmp" | sort; } > "$ITEST_DURATIONS"
  rm -f "$tmp"
  echo "itest: durations written to $ITEST_DURATIONS"
fi
exit $rc
