package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerCostMain measures what the broker spends on the same records written
// three ways: idempotent (acks=all, as the naive baseline and at-least-once
// write), and transactional in transactions of two sizes (as exactly-once
// writes). Each way writes -records records of 150 bytes into a fresh
// 6-partition topic, in batches that end with Flush (and EndTxn), after a
// first batch not counted; the ways are interleaved over -rounds rounds. It
// reads the broker's CPU time from /proc, so the broker must run on this
// machine: -kafka-dir names deploy/dev/kafka.sh's KAFKA_DIR (its pid file).
//
//	go run ./bench brokercost -brokers 127.0.0.1:29392 -kafka-dir /tmp/kafka
func brokerCostMain(args []string) error {
	fs := flag.NewFlagSet("brokercost", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "host:port of the broker")
	dir := fs.String("kafka-dir", "", "the broker's KAFKA_DIR (deploy/dev/kafka.sh), for its pid")
	records := fs.Int("records", 2_000_000, "records per way and round")
	sizes := fs.String("txn-records", "20000,50000", "records per transaction of the transactional ways")
	rounds := fs.Int("rounds", 3, "rounds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pid := pidFile(filepath.Join(*dir, "kafka.pid"))
	if *brokers == "" || pid == 0 {
		return errors.New("-brokers and a -kafka-dir holding kafka.pid are required")
	}
	type way struct {
		name  string
		batch int
		txn   bool
	}
	ways := []way{{"idempotent", 20000, false}}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-txn-records: %q is not a positive number", f)
		}
		ways = append(ways, way{fmt.Sprintf("transactions of %d", n), n, true})
	}
	cpu := make([][]time.Duration, len(ways))
	took := make([][]time.Duration, len(ways))
	for r := 0; r < *rounds; r++ {
		for i, w := range ways {
			c, d, err := brokerCostRun(*brokers, pid, *records, w.batch, w.txn)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			cpu[i], took[i] = append(cpu[i], c), append(took[i], d)
		}
	}
	fmt.Printf("%d records of 150 bytes per way, 6 partitions, %d rounds interleaved; broker CPU s and seconds, median (min-max)\n\n", *records, *rounds)
	fmt.Println("| way | broker CPU s | seconds |\n|---|---|---|")
	for i, w := range ways {
		fmt.Printf("| %s | %s | %s |\n", w.name, secondsSpread(cpu[i]), secondsSpread(took[i]))
	}
	return nil
}

// secondsSpread renders ds as "median (min-max)" in seconds.
func secondsSpread(ds []time.Duration) string {
	fs := make([]float64, len(ds))
	for i, d := range ds {
		fs[i] = d.Seconds()
	}
	lo, mid, hi := spread(fs)
	return fmt.Sprintf("%.2f (%.2f-%.2f)", mid, lo, hi)
}

// brokerCostRun writes n records into a new topic in batches of batch and
// returns the broker's CPU time and the time it took, after one batch not
// counted (the topic's first write, the producer's metadata).
func brokerCostRun(broker string, pid, n, batch int, txn bool) (time.Duration, time.Duration, error) {
	// A stuck Flush or EndTxn ends the run with an error, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("brokercost-%d", time.Now().UnixNano())
	adm, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return 0, 0, err
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 6, 1, nil, topic); err != nil {
		return 0, 0, err
	}
	defer func() {
		// Every topic the broker holds grows its heap (and its GC work
		// in the runs after): a finished run's goes.
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		resp, err := kadm.NewClient(adm).DeleteTopics(dctx, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: delete topic %s: %v\n", topic, err)
		}
	}()
	opts := []kgo.Opt{kgo.SeedBrokers(broker), kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(2 * batch), kgo.RequiredAcks(kgo.AllISRAcks())}
	if txn {
		opts = append(opts, kgo.TransactionalID(topic))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	value := []byte(strings.Repeat("v", 150))
	var errMu sync.Mutex
	var produceErr error // the first record refused
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			errMu.Lock()
			produceErr = cmp.Or(produceErr, err)
			errMu.Unlock()
		}
	}
	write := func(count int) error {
		if txn {
			if err := cl.BeginTransaction(); err != nil {
				return err
			}
		}
		for i := 0; i < count; i++ {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: strconv.AppendInt(nil, int64(i%1000), 10), Value: value}, promise)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		errMu.Lock()
		err := produceErr
		errMu.Unlock()
		if err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		if txn {
			return cl.EndTransaction(ctx, kgo.TryCommit)
		}
		return nil
	}
	if err := write(batch); err != nil {
		return 0, 0, err
	}
	cpu0, began := procCPU(pid), time.Now()
	for left := n; left > 0; left -= batch {
		if err := write(min(batch, left)); err != nil {
			return 0, 0, err
		}
	}
	return procCPU(pid) - cpu0, time.Since(began), nil
}
