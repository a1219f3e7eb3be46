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
// Usage: go run ./bench [-n 1000000] [-rounds 3] [-out BENCHMARKS.md]; `bench baseline`
// is the baseline process the harness starts itself.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "baseline" {
		if err := baselineMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		return
	}
	n := flag.Int("n", 1_000_000, "outbox rows per shape for the catch-up runs")
	bigTx := flag.Int("big-tx", 500_000, "rows of the one large transaction for the memory run")
	latencySeconds := flag.Int("latency-seconds", 10, "seconds per write rate in the latency runs")
	rounds := flag.Int("rounds", 3, "catch-up rounds (baseline, exactly-once, at-least-once each) per shape; the report gives medians")
	out := flag.String("out", "", "write the Markdown report here (default: stdout only)")
	flag.Parse()
	if err := run(*n, *bigTx, *latencySeconds, *rounds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
