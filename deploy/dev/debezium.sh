#!/usr/bin/env bash
# Debezium's MySQL connector with the outbox EventRouter on Kafka Connect,
# standalone (the side-by-side benchmark, make bench-debezium) or
# distributed (the switch-over test, make test-debezium).
#
#   deploy/dev/debezium.sh fetch      fetch the jars (cached) and exit
#   deploy/dev/debezium.sh seed       write the offset file into $DBZ_DIR
#   deploy/dev/debezium.sh run        standalone: write the worker and connector
#                                     configs into $DBZ_DIR, seed the offset file
#                                     unless seed wrote it, exec the Connect
#                                     worker (foreground)
#   deploy/dev/debezium.sh distributed
#                                     distributed: write the worker config into
#                                     $DBZ_DIR and exec a Connect distributed
#                                     worker (foreground): its config, offset and
#                                     status topics on $DBZ_BOOTSTRAP, its REST
#                                     API on 127.0.0.1:$DBZ_REST_PORT
#   deploy/dev/debezium.sh register   distributed: create the connector over
#                                     REST in the STOPPED state, set its offset
#                                     to DBZ_BINLOG_FILE/DBZ_BINLOG_POS (PATCH
#                                     /connectors/NAME/offsets), then resume it
#   deploy/dev/debezium.sh stop-connector
#                                     distributed: stop the connector over REST
#                                     (its task commits its offsets as it stops)
#                                     and wait until Connect reports it STOPPED
#
# fetch resolves io.debezium:debezium-connector-mysql:$DEBEZIUM_VERSION (the
# EventRouter SMT is in its dependency debezium-connect-plugins) and
# org.apache.kafka:connect-runtime, connect-json, connect-transforms
# $KAFKA_VERSION with their runtime dependencies from Maven Central with
# Maven, as deploy/dev/kafka.sh does, into $DBZ_CACHE (kept and reused).
#
# run and register read (required): DBZ_DIR (scratch directory),
# DBZ_BOOTSTRAP (Kafka host:port), DBZ_DB_HOST, DBZ_DB_PORT, DBZ_DB_USER,
# DBZ_DB_PASSWORD, DBZ_DB (database holding the table `outbox`),
# DBZ_TOPIC_PREFIX (records go to <prefix><aggregate_type>, the relay's
# routing), DBZ_BINLOG_FILE and DBZ_BINLOG_POS (the binlog position to start
# from, seeded as the connector's offset; the connector runs with
# snapshot.mode=recovery, which captures only the table structure and streams
# from the seeded offset). distributed reads DBZ_DIR, DBZ_BOOTSTRAP and
# DBZ_REST_PORT; register and stop-connector DBZ_REST_PORT too.
# Optional: DBZ_POLL_MS (poll.interval.ms; unset: Debezium's default, 500),
# DBZ_SERVER_ID (default 6001), DBZ_HEAP (default 1g), DBZ_REST_PORT (default
# 0 for run: any free port), DBZ_EXTRA (more connector properties, one per
# line), DBZ_NAME (connector name, default outbox-debezium), DBZ_SERVER
# (topic.prefix, default dbz), DBZ_GROUP (the distributed workers' group.id,
# default outbox-debezium-connect), DBZ_OFFSETS_TOPIC (offset.storage.topic,
# default connect-offsets; the config and status topics are named after the
# group), DBZ_FLUSH_MS (offset.flush.interval.ms, default 10000),
# DBZ_FLUSH_TIMEOUT_MS (offset.flush.timeout.ms and
# task.shutdown.graceful.timeout.ms: how long a flush, the one at a task's
# stop included, waits for the records sent, and a stop for the task;
# default 5000, Connect's: a task that takes longer to stop is cancelled and
# the records its producer still holds are dropped).
#
# The server must report a MySQL 5.7-compatible version (MariaDB started
# with --version=5.7.19-10.11-MariaDB-log): the MariaDB connector artifact
# is not on Maven Central, and the MySQL connector refuses version strings
# it does not parse as MySQL.
#
# Routing matches the relay's defaults: topic per aggregate_type, key =
# aggregate_id, value = payload bytes as stored (StringConverter for keys and
# values; JsonConverter would quote the payload as a JSON string), header id
# = event_id, header type = event_type.
set -euo pipefail

DEBEZIUM_VERSION=${DEBEZIUM_VERSION:-3.6.1.Final}
KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
DBZ_CACHE=${DBZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/debezium-$DEBEZIUM_VERSION-connect-$KAFKA_VERSION}
DBZ_HEAP=${DBZ_HEAP:-1g}

log() { echo "debezium.sh: $*" >&2; }

fetch() {
  [ -f "$DBZ_CACHE/.complete" ] && return 0
  command -v mvn >/dev/null || { log "Maven (mvn) is needed to fetch Debezium"; exit 1; }
  command -v java >/dev/null || { log "Java 17+ is needed to run Kafka Connect"; exit 1; }
  log "fetching Debezium $DEBEZIUM_VERSION and Kafka Connect $KAFKA_VERSION from Maven Central"
  local work; work=$(mktemp -d)
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.outbox-relay</groupId><artifactId>debezium-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-mysql</artifactId><version>$DEBEZIUM_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-transforms</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  mkdir -p "$DBZ_CACHE/libs"
  mvn -q -B -Dstyle.color=never -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$DBZ_CACHE/libs"
  rm -rf "$work"
  touch "$DBZ_CACHE/.complete"
}

need() { for v in "$@"; do [ -n "${!v:-}" ] || { log "$v is required"; exit 2; }; done; }

# seed writes Connect's file offset store (a Java-serialized
# HashMap<byte[],byte[]>, as FileOffsetBackingStore writes it) holding one
# offset: the connector's source partition -> the binlog position.
seed() {
  local key="[\"$1\",{\"server\":\"$2\"}]" value="{\"file\":\"$DBZ_BINLOG_FILE\",\"pos\":$DBZ_BINLOG_POS}"
  cat > "$DBZ_DIR/SeedOffset.java" <<'JAVA'
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
public class SeedOffset {
  public static void main(String[] a) throws Exception {
    HashMap<byte[], byte[]> m = new HashMap<>();
    m.put(a[1].getBytes(StandardCharsets.UTF_8), a[2].getBytes(StandardCharsets.UTF_8));
    try (ObjectOutputStream os = new ObjectOutputStream(new FileOutputStream(a[0]))) { os.writeObject(m); }
  }
}
JAVA
  java "$DBZ_DIR/SeedOffset.java" "$DBZ_DIR/offsets.dat" "$key" "$value"
}

NAME=${DBZ_NAME:-outbox-debezium} SERVER=${DBZ_SERVER:-dbz}

# connector_props prints the connector's properties, one key=value a line.
connector_props() {
  cat <<PROPS
connector.class=io.debezium.connector.mysql.MySqlConnector
tasks.max=1
database.hostname=$DBZ_DB_HOST
database.port=$DBZ_DB_PORT
database.user=$DBZ_DB_USER
database.password=$DBZ_DB_PASSWORD
database.server.id=${DBZ_SERVER_ID:-6001}
database.ssl.mode=disabled
topic.prefix=$SERVER
database.include.list=$DBZ_DB
table.include.list=$DBZ_DB.outbox
include.schema.changes=false
snapshot.mode=recovery
schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory
schema.history.internal.file.filename=$DBZ_DIR/schema-history.dat
schema.history.internal.store.only.captured.tables.ddl=true
${DBZ_POLL_MS:+poll.interval.ms=$DBZ_POLL_MS}
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.id=event_id
transforms.outbox.table.field.event.key=aggregate_id
transforms.outbox.table.field.event.payload=payload
transforms.outbox.route.by.field=aggregate_type
transforms.outbox.route.topic.replacement=$DBZ_TOPIC_PREFIX\${routedByValue}
transforms.outbox.table.fields.additional.placement=event_type:header:type
${DBZ_EXTRA:-}
PROPS
}

# json_string quotes $1 as a JSON string.
json_string() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}

log4j() {
  cat > "$DBZ_DIR/log4j2.properties" <<LOG
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$DBZ_DIR/connect.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
LOG
}

run() {
  need DBZ_DIR DBZ_BOOTSTRAP DBZ_DB_HOST DBZ_DB_PORT DBZ_DB_USER DBZ_DB_PASSWORD DBZ_DB DBZ_TOPIC_PREFIX DBZ_BINLOG_FILE DBZ_BINLOG_POS
  fetch
  umask 077 # the connector file holds the database password
  mkdir -p "$DBZ_DIR"
  cat > "$DBZ_DIR/worker.properties" <<PROPS
bootstrap.servers=$DBZ_BOOTSTRAP
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$DBZ_DIR/offsets.dat
offset.flush.interval.ms=${DBZ_FLUSH_MS:-10000}
offset.flush.timeout.ms=${DBZ_FLUSH_TIMEOUT_MS:-5000}
task.shutdown.graceful.timeout.ms=${DBZ_FLUSH_TIMEOUT_MS:-5000}
listeners=http://127.0.0.1:${DBZ_REST_PORT:-0}
plugin.discovery=only_scan
PROPS
  { echo "name=$NAME"; connector_props; } > "$DBZ_DIR/connector.properties"
  log4j
  [ -f "$DBZ_DIR/offsets.dat" ] || seed "$NAME" "$SERVER"
  exec java -Xmx"$DBZ_HEAP" -cp "$DBZ_CACHE/libs/*" -Dlog4j2.configurationFile="$DBZ_DIR/log4j2.properties" \
    org.apache.kafka.connect.cli.ConnectStandalone "$DBZ_DIR/worker.properties" "$DBZ_DIR/connector.properties"
}

distributed() {
  need DBZ_DIR DBZ_BOOTSTRAP DBZ_REST_PORT
  fetch
  mkdir -p "$DBZ_DIR"
  local group=${DBZ_GROUP:-outbox-debezium-connect}
  cat > "$DBZ_DIR/worker-distributed.properties" <<PROPS
bootstrap.servers=$DBZ_BOOTSTRAP
group.id=$group
config.storage.topic=$group.configs
offset.storage.topic=${DBZ_OFFSETS_TOPIC:-connect-offsets}
status.storage.topic=$group.status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.flush.interval.ms=${DBZ_FLUSH_MS:-10000}
offset.flush.timeout.ms=${DBZ_FLUSH_TIMEOUT_MS:-5000}
task.shutdown.graceful.timeout.ms=${DBZ_FLUSH_TIMEOUT_MS:-5000}
listeners=http://127.0.0.1:$DBZ_REST_PORT
rest.advertised.host.name=127.0.0.1
plugin.discovery=only_scan
PROPS
  log4j
  exec java -Xmx"$DBZ_HEAP" -cp "$DBZ_CACHE/libs/*" -Dlog4j2.configurationFile="$DBZ_DIR/log4j2.properties" \
    org.apache.kafka.connect.cli.ConnectDistributed "$DBZ_DIR/worker-distributed.properties"
}

# rest calls the worker's REST API: method, path, body (optional); it fails
# on an HTTP error, printing the answer.
rest() {
  local out code
  out=$(mktemp)
  code=$(curl -sS -o "$out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' ${3:+--data "$3"} \
    "http://127.0.0.1:$DBZ_REST_PORT$2") || { rm -f "$out"; return 1; }
  if [ "$code" -ge 300 ]; then
    log "$1 $2: HTTP $code: $(cat "$out")"
    rm -f "$out"
    return 1
  fi
  cat "$out"
  rm -f "$out"
}

# wait_for runs "$@" until it succeeds, up to 120 s.
wait_for() {
  local i
  for i in $(seq 1200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "timed out waiting for: $*"
  return 1
}

connector_state() {
  rest GET "/connectors/$NAME/status" | grep -q "\"connector\":{\"state\":\"$1\""
}

register() {
  need DBZ_DIR DBZ_REST_PORT DBZ_DB_HOST DBZ_DB_PORT DBZ_DB_USER DBZ_DB_PASSWORD DBZ_DB DBZ_TOPIC_PREFIX DBZ_BINLOG_FILE DBZ_BINLOG_POS
  wait_for rest GET /connectors
  local config="" k v
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    k=${line%%=*} v=${line#*=}
    config+="${config:+,}$(json_string "$k"):$(json_string "$v")"
  done < <(connector_props)
  rest POST /connectors "{\"name\":$(json_string "$NAME"),\"config\":{$config},\"initial_state\":\"STOPPED\"}" >/dev/null
  wait_for connector_state STOPPED
  rest PATCH "/connectors/$NAME/offsets" "{\"offsets\":[{\"partition\":{\"server\":$(json_string "$SERVER")},\"offset\":{\"file\":$(json_string "$DBZ_BINLOG_FILE"),\"pos\":$DBZ_BINLOG_POS}}]}" >/dev/null
  rest PUT "/connectors/$NAME/resume" >/dev/null
  wait_for connector_state RUNNING
}

# stopped: the connector is STOPPED and has no task left (a task commits
# its offsets as it stops).
stopped() {
  rest GET "/connectors/$NAME/status" | grep -q "\"connector\":{\"state\":\"STOPPED\".*\"tasks\":\[\]"
}

stop_connector() {
  need DBZ_REST_PORT
  rest PUT "/connectors/$NAME/stop" >/dev/null
  wait_for stopped
}

case "${1:-}" in
  fetch) fetch ;;
  seed) need DBZ_DIR DBZ_BINLOG_FILE DBZ_BINLOG_POS; fetch; mkdir -p "$DBZ_DIR"; seed "$NAME" "$SERVER" ;;
  run) run ;;
  distributed) distributed ;;
  register) register ;;
  stop-connector) stop_connector ;;
  *) echo "usage: $0 fetch|seed|run|distributed|register|stop-connector" >&2; exit 2 ;;
esac
