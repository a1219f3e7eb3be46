// Command bench measures outbox-relay on this machine with a scratch MariaDB
// and the embedded Kafka broker in its own process (`outbox-relay dev
// kafka`), and writes a Markdown report:
//
//  1. catch-up throughput from `earliest` over N outbox rows in two shapes
//     (one outbox + one business row per transaction; INSERTs of 200 rows),
//     exactly-once and at-least-once, against a naive baseline (go-mysql
//     BinlogSyncer + franz-go async Produce, no checkpoint, no transactions)
//     over the same binlog and broker, each run as its own process and timed
//     from process start until everything is published;
//  2. commit-to-receive latency at fixed write rates, exactly-once;
//  3. peak RSS of the relay during (1) and during one 500,000-row transaction;
//  4. a CPU profile of the exactly-once run of (1);
//  5. time from start to the first published record.
//
// Catch-up runs come in rounds (baseline, exactly-once, at-least-once over
// the same binlog, one after the other); ratios are taken within a round and
// the report gives their median with every round's figures, since on a small
// machine one run can move by 15%.
//
// Each part runs on kfake and on Apache Kafka (-brokers, -kafka).
//
// -sections audit (make bench-audit, not in the default) publishes
// -audit-n rows and times `outbox-relay audit` over them (audit.go).
//
// -sections debezium (make bench-debezium, not in the default) runs
// Debezium's MySQL connector with the outbox EventRouter on Kafka Connect
// standalone side by side with the relay and compares their records
// (debezium.go).
//
// Usage: go run ./bench [-n 1000000] [-rounds 3] [-brokers kfake,kafka]
// [-kafka HOST:PORT] [-sections txn,catchup,batch,latency,bigtx,profile]
// [-latency-runs exactly-once:1000:1,...] [-latency-profiles DIR]
// [-out BENCHMARKS.md]; `bench baseline` is the baseline process the harness
// starts itself; `bench txn -brokers HOST:PORT` times the parts of one Kafka
// transaction (txnprobe.go); `bench brokercost -brokers HOST:PORT -kafka-dir
// DIR` compares the broker CPU of idempotent and transactional writes of the
// same records (brokercost.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// subcommands are the bench's processes other than the report.
var subcommands = map[string]func([]string) error{
	"baseline":   baselineMain,
	"brokercost": brokerCostMain,
	"raw":        rawMain,
	"txn":        txnProbeMain,
}

func main() {
	if len(os.Args) > 1 {
		if run, ok := subcommands[os.Args[1]]; ok {
			if err := run(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	n := flag.Int("n", 1_000_000, "outbox rows per shape for the catch-up runs")
	bigTx := flag.Int("big-tx", 500_000, "rows of the one large transaction for the memory run")
	latencySeconds := flag.Int("latency-seconds", 10, "seconds per write rate in the latency runs")
	rounds := flag.Int("rounds", 3, "catch-up rounds (baseline, exactly-once, at-least-once each) per shape; the report gives medians")
	out := flag.String("out", "", "write the Markdown report here (default: stdout only)")
	brokers := flag.String("brokers", "kfake,kafka", "brokers to measure on, in order: kfake (embedded, in memory), kafka (Apache Kafka)")
	kafkaAddr := flag.String("kafka", "", "host:port of a running Apache Kafka to use; empty: start deploy/dev/kafka.sh on a free port and stop it afterwards")
	sections := flag.String("sections", "txn,catchup,batch,latency,bigtx,profile", "report sections to run: txn (one Kafka transaction timed), catchup, batch (batch bound), latency, bigtx (memory through one large transaction), profile; debezium (side by side with Debezium, deploy/dev/debezium.sh; not in the default)")
	dbzShapes := flag.String("debezium-shapes", "single,multi200", "shapes the debezium section measures (single, multi200)")
	shapes := flag.String("shapes", "single,multi200", "shapes the catchup and batch sections measure: single (one outbox and one business row per transaction), multi200 (INSERTs of 200 outbox rows)")
	batchRecords := flag.String("batch-records", "5000,20000", "kafka.batch.max_records values the batch section compares")
	linger := flag.Duration("linger", -1, "kafka.linger of every relay run (default: the relay's default)")
	lanes := flag.Int("lanes", 0, "kafka.transaction_lanes of every relay run, 1 or 2 (default: the relay's default)")
	latencyRuns := flag.String("latency-runs", "", "section 2's runs as delivery:rate:events-per-transaction, comma separated (default: exactly-once at 100, 1,000, 5,000 and 10,000 events/s, at-least-once at 1,000, and 10,000/s in 10-event transactions)")
	brokerThreads := flag.Bool("broker-threads", false, "print the broker's CPU time per thread name (request handlers, JIT, GC) for every baseline and relay catch-up run to stderr")
	brokerGC := flag.Bool("broker-gc", true, "have Apache Kafka's JVM collect its heap (jcmd GC.run) before each timed catch-up run, so that no run pays for the garbage of the run before it")
	latencyProfiles := flag.String("latency-profiles", "", "write the relay's CPU profile of each latency run into this directory (DELIVERY-RATE-PERTX.pprof)")
	latencySteps := flag.String("latency-steps", "", "write each latency run's events (id, commit and arrival time) and the relay's step trace into this directory (DELIVERY-RATE-PERTX.events, .steps; the steps need a relay built with -tags steptrace, as -relay-bin) and print the breakdown per step")
	auditN := flag.Int("audit-n", 1_000_000, "outbox rows the audit section (-sections audit, not in the default) publishes and then audits")
	relayBin := flag.String("relay-bin", "", "measure this relay binary instead of building ./cmd/outbox-relay (to compare two builds)")
	relayBinB := flag.String("relay-bin-b", "", "a second relay binary whose exactly-once catch-up runs as one more contender of each round (an A/B of two builds in the same rounds)")
	flag.Parse()
	o := options{relayBin: *relayBin, n: *n, bigTx: *bigTx, latencySeconds: *latencySeconds, rounds: *rounds, out: *out,
		brokers: strings.Split(*brokers, ","), kafkaAddr: *kafkaAddr, sections: map[string]bool{}, args: strings.Join(os.Args[1:], " "),
		debeziumShapes: strings.Split(*dbzShapes, ","), shapes: strings.Split(*shapes, ",")}
	o.linger = *linger
	o.relayBinB = *relayBinB
	o.auditN = *auditN
	o.lanes = *lanes
	o.latencyProfiles = *latencyProfiles
	o.latencySteps = *latencySteps
	o.brokerThreads = *brokerThreads
	o.noBrokerGC = !*brokerGC
	o.latencyRuns = defaultLatencyRuns
	if *latencyRuns != "" {
		runs, err := parseLatencyRuns(*latencyRuns)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		o.latencyRuns = runs
	}
	for _, v := range strings.Split(*batchRecords, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -batch-records: %q: write positive numbers separated by commas\n", v)
			os.Exit(2)
		}
		o.batchRecords = append(o.batchRecords, n)
	}
	for _, s := range strings.Split(*sections, ",") {
		o.sections[s] = true
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
