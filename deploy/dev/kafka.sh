#!/usr/bin/env bash
# Apache Kafka (KRaft, one node) for tests and local work.
#
#   deploy/dev/kafka.sh fetch|start|stop|restart|status
#
# fetch fetches org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime
# dependencies from Maven Central with Maven (cached in $KAFKA_CACHE and
# reused; start fetches them when missing: fetch first when several brokers
# start at once). start formats a single-node KRaft store in $KAFKA_DIR if it
# is new, starts the broker on 127.0.0.1:$KAFKA_PORT with single-node
# settings and waits until it answers. stop ends only the process start
# started (its pid file).
#
# Environment (defaults):
#   KAFKA_VERSION  4.1.1
#   KAFKA_PORT     29092 (the controller listens on KAFKA_PORT+1)
#   KAFKA_DIR      ${TMPDIR:-/tmp}/outbox-relay-kafka-$KAFKA_PORT
#   KAFKA_CACHE    ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/kafka-$KAFKA_VERSION
#   KAFKA_HEAP     512m (-Xms and -Xmx, as kafka-server-start.sh sets both)
#   KAFKA_GC       g1: Kafka's own G1 options (20 ms pause target);
#                  zgc: -XX:+UseZGC (pauses under a millisecond, its GC
#                  threads run beside the broker's); shenandoah:
#                  -XX:+UseShenandoahGC. The GC log (gc.log in KAFKA_DIR)
#                  names the collector and has its pauses either way.
#   KAFKA_JVM_OPTS Kafka's KAFKA_JVM_PERFORMANCE_OPTS with KAFKA_GC's
#                  collector; set, it replaces them all (KAFKA_GC then only
#                  chooses what the GC log records)
#   KAFKA_SASL     unset; 1: least-privilege mode: an ACL authorizer
#                  (StandardAuthorizer) and a SASL_PLAINTEXT listener with
#                  SCRAM-SHA-256/512 on KAFKA_SASL_PORT (KAFKA_PORT+2). The
#                  PLAINTEXT listener on KAFKA_PORT stays, as the super user
#                  (User:ANONYMOUS), for setting up users, ACLs and topics.
#                  Users are created over the API (AlterUserScramCredentials).
set -euo pipefail

KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
KAFKA_PORT=${KAFKA_PORT:-29092}
CONTROLLER_PORT=$((KAFKA_PORT + 1))
KAFKA_DIR=${KAFKA_DIR:-${TMPDIR:-/tmp}/outbox-relay-kafka-$KAFKA_PORT}
KAFKA_CACHE=${KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/kafka-$KAFKA_VERSION}
KAFKA_HEAP=${KAFKA_HEAP:-512m}
KAFKA_SASL=${KAFKA_SASL:-}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}
PIDFILE=$KAFKA_DIR/kafka.pid

log() { echo "kafka.sh: $*" >&2; }

fetch() {
  [ -f "$KAFKA_CACHE/.complete" ] && return 0
  command -v mvn >/dev/null || { log "Maven (mvn) is needed to fetch Kafka"; exit 1; }
  command -v java >/dev/null || { log "Java 17+ is needed to run Kafka"; exit 1; }
  log "fetching Apache Kafka $KAFKA_VERSION and its dependencies from Maven Central"
  local work; work=$(mktemp -d)
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.outbox-relay</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  mkdir -p "$KAFKA_CACHE/libs"
  mvn -q -B -Dstyle.color=never -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$KAFKA_CACHE/libs"
  rm -rf "$work"
  touch "$KAFKA_CACHE/.complete"
}

# The broker's JVM options are Kafka's own (kafka-server-start.sh: heap
# fixed at its size, KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh), so
# it runs as users run it: the JVM's defaults aim G1 at 200 ms pauses.
# KAFKA_GC swaps the collector for one an operator tunes for latency;
# ZGC logs its pauses under gc+phases, the others under gc.
KAFKA_GC=${KAFKA_GC:-g1}
case $KAFKA_GC in
  g1) GC_OPTS="-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent" GC_LOG=gc ;;
  zgc) GC_OPTS="-XX:+UseZGC" GC_LOG=gc,gc+phases ;;
  shenandoah) GC_OPTS="-XX:+UseShenandoahGC" GC_LOG=gc ;;
  *) log "KAFKA_GC=$KAFKA_GC: write g1, zgc or shenandoah"; exit 2 ;;
esac
KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:--server $GC_OPTS -XX:MaxInlineLevel=15 -Djava.awt.headless=true}

java_kafka() { java -Xmx"$KAFKA_HEAP" -cp "$KAFKA_CACHE/libs/*" -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" "$@"; }

configure() {
  mkdir -p "$KAFKA_DIR/data"
  cat > "$KAFKA_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=false
PROPS
  if [ -n "$KAFKA_SASL" ]; then
    sed -i -e "s|^listeners=.*|listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT|" \
      -e "s|^advertised.listeners=.*|advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT|" \
      -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT|" \
      "$KAFKA_DIR/server.properties"
    cat >> "$KAFKA_DIR/server.properties" <<PROPS
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPS
  fi
  cat > "$KAFKA_DIR/log4j2.properties" <<LOG
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$KAFKA_DIR/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka.server.KafkaRaftServer
logger.kafka.level=INFO
LOG
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    local id; id=$(java_kafka kafka.tools.StorageTool random-uuid)
    java_kafka kafka.tools.StorageTool format -t "$id" -c "$KAFKA_DIR/server.properties" --standalone >/dev/null
  fi
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && grep -q "Kafka Server started" "$KAFKA_DIR/server.log" 2>/dev/null; }

start() {
  if running; then log "already running (pid $(cat "$PIDFILE")) on 127.0.0.1:$KAFKA_PORT"; return 0; fi
  fetch
  configure
  # A port in the ephemeral range (32768-60999 on Linux) can be held for a
  # moment by some client's connection: the broker exits at once, and is
  # started again, a few times.
  for attempt in 1 2 3 4 5; do
    : > "$KAFKA_DIR/server.log"
    # shellcheck disable=SC2086 # KAFKA_JVM_OPTS is a list of options
    # GC log as kafka-server-start.sh keeps one (the collector and its pauses;
    # bench reads it).
    nohup java -Xms"$KAFKA_HEAP" -Xmx"$KAFKA_HEAP" $KAFKA_JVM_OPTS -Xlog:"$GC_LOG":file="$KAFKA_DIR/gc.log":uptime -cp "$KAFKA_CACHE/libs/*" -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
      kafka.Kafka "$KAFKA_DIR/server.properties" > "$KAFKA_DIR/kafka.out" 2>&1 &
    echo $! > "$PIDFILE"
    for _ in $(seq 1 600); do
      if answers; then log "Apache Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (pid $(cat "$PIDFILE"), data $KAFKA_DIR)"; return 0; fi
      running || break
      sleep 0.2
    done
    if running; then log "broker did not answer within 120s"; stop; exit 1; fi
    if [ "$attempt" -lt 5 ] && grep -q "Address already in use" "$KAFKA_DIR/server.log" 2>/dev/null; then
      log "a port of 127.0.0.1:$KAFKA_PORT-$((KAFKA_PORT + 2)) is in use: starting again"; sleep 1; continue
    fi
    log "broker exited during start-up:"; tail -n 20 "$KAFKA_DIR/kafka.out" "$KAFKA_DIR/server.log" >&2; exit 1
  done
}

stop() {
  running || { rm -f "$PIDFILE"; return 0; }
  local pid; pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$PIDFILE"
  log "stopped pid $pid"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running; then echo "running pid $(cat "$PIDFILE") on 127.0.0.1:$KAFKA_PORT"; else echo stopped; exit 1; fi ;;
  *) echo "usage: $0 fetch|start|stop|restart|status" >&2; exit 2 ;;
esac
