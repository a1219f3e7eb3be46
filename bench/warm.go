package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Two costs of Apache Kafka that belong to no contender, taken out of the
// timed runs for all of them alike.
//
// A freshly started broker compiles its request paths for minutes (its JIT
// is CPU-hungry on two cores: 36 of its first 55 CPU seconds in one
// measurement); one warm-up round per shape leaves it compiling through the
// measured rounds, in whichever contender's run it happens to fall.
// warmBroker writes idempotently and in transactions until the broker's
// count of compiled methods (jstat) stops growing.
//
// The first write into each partition of a freshly created topic was
// answered after 30-330 ms during the catch-up runs (14 ms on an idle
// machine; the broker's request log shows it as local time of that one
// produce request), paid by the baseline and the relay alike at random.
// primeTopic writes one record into each partition of a contender's output
// topic (and the relay's checkpoint topic) before its clock starts, as a
// deployment's topics have been written before; readers skip it by its
// header.

// outputPartitions is the partition count of the topics the harness
// creates for the contenders (createTopic); primeTopic writes one record
// into each.
const outputPartitions = 6

// primeHeader marks the records primeTopic writes; readers skip them.
const primeHeader = "bench-prime"

// primeTopic writes one record into each of topic's partitions, acks=all,
// non-transactionally; with a key and no value, so that in a compacted
// checkpoint topic it is neither a checkpoint nor read as one.
func (h *harness) primeTopic(topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, partitions)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(primeHeader), Headers: []kgo.RecordHeader{{Key: primeHeader}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("prime topic %s: %w", topic, err)
	}
	return nil
}

// primed reports whether r is a record primeTopic wrote.
func primed(r *kgo.Record) bool {
	return len(r.Headers) == 1 && r.Headers[0].Key == primeHeader
}

// newOutputTopic creates a contender's output topic and primes it.
func (h *harness) newOutputTopic(topic string) error {
	if err := h.createTopic(topic); err != nil {
		return err
	}
	return h.primeTopic(topic, outputPartitions)
}

// newCheckpointTopic creates a relay's checkpoint topic as the relay would
// (compacted, one partition) and primes it: in a deployment it exists
// after the relay's first start. The relay still finds no checkpoint of its
// own name there and writes its first one.
func (h *harness) newCheckpointTopic(topic string) error {
	if err := createTopic(h.broker, topic, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}); err != nil {
		return err
	}
	return h.primeTopic(topic, 1)
}

// warmBroker writes to the Apache Kafka broker until a pass adds fewer
// than 50 compiled methods (jstat), at most warmMaxPasses; without jstat
// (or the broker's pid) it makes warmFixedPasses. A pass is one
// brokerCostRun each way (idempotent, then in transactions of 20,000):
// a new 6-partition topic, 20,000 records not counted and then
// warmRecords, 150-byte values under 1,000 keys, linger 5 ms, acks=all,
// franz-go's default (snappy) compression. It returns a sentence for the
// report. It exercises the produce and transaction paths only; the round
// not counted before each shape's rounds warms the rest (topic creation,
// offsets, read_committed fetches, consumer groups).
func (h *harness) warmBroker() (string, error) {
	began := time.Now()
	before, watched := 0, false
	if h.brokerPID != 0 {
		before, watched = compiledMethods(h.brokerPID)
	}
	last, grew, passes := before, 0, 0
	for passes < warmMaxPasses {
		for _, txn := range []bool{false, true} {
			if _, _, err := brokerCostRun(h.broker, h.brokerPID, warmRecords, 20_000, txn); err != nil {
				return "", fmt.Errorf("warm broker: %w", err)
			}
		}
		passes++
		if watched {
			now, ok := compiledMethods(h.brokerPID)
			if !ok {
				watched = false // jstat stopped answering: fixed passes from here
			} else {
				grew, last = now-last, now
				fmt.Fprintf(os.Stderr, "bench: broker warm-up pass %d: %d methods compiled (+%d)\n", passes, now, grew)
				if grew < 50 {
					break
				}
				continue
			}
		}
		if passes >= warmFixedPasses {
			break
		}
	}
	how := fmt.Sprintf("%d passes, each a new 6-partition topic written with 500,000 records idempotently and another with 500,000 in transactions of 20,000 (after 20,000 not counted; 150-byte values, linger 5 ms, acks=all, snappy; `bench brokercost`'s writer), %.0f s",
		passes, time.Since(began).Seconds())
	switch {
	case !watched:
		return fmt.Sprintf("Broker warmed up before measuring: %s; its JIT was not watched (no broker pid, or `jstat -compiler` did not answer).", how), nil
	case grew >= 50:
		return fmt.Sprintf("Broker warmed up before measuring: %s; its JIT had not settled after %d passes (`jstat -compiler`: %d -> %d methods, +%d in the last pass).", how, warmMaxPasses, before, last, grew), nil
	default:
		return fmt.Sprintf("Broker warmed up before measuring until its JIT settled on the produce and transaction paths: %s, until a pass added fewer than 50 compiled methods (`jstat -compiler`: %d -> %d).", how, before, last), nil
	}
}

const (
	warmRecords     = 500_000
	warmMaxPasses   = 15
	warmFixedPasses = 4
)

// compiledMethods is the JVM's count of compiled methods (jstat -compiler).
func compiledMethods(pid int) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "jstat", "-compiler", strconv.Itoa(pid)).Output()
	if err != nil {
		return 0, false
	}
	return jstatCompiled(string(out))
}

// jstatCompiled reads the "Compiled" column of `jstat -compiler` output: a
// header line, then one line of values.
func jstatCompiled(out string) (int, bool) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "Compiled") {
		return 0, false
	}
	f := strings.Fields(lines[len(lines)-1])
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}

// observerWait is the fetch wait of the readers that time a run (the
// checkpoint reader, the first-record reader). Apache Kafka answers a
// waiting read_committed fetch as soon as a commit makes records readable,
// so a long wait costs no time and spares the broker 100 empty fetches a
// second, which it would otherwise spend on the relay's runs only (the
// baseline's end is its own acknowledgement); kfake is asked every 10 ms.
func (h *harness) observerWait() time.Duration {
	if h.apache {
		return 500 * time.Millisecond
	}
	return 10 * time.Millisecond
}
