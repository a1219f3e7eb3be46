package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// txnProbeMain (`bench txn -brokers HOST:PORT`) times the parts of one
// exactly-once batch as the relay writes it: BeginTransaction, records into
// -partitions partitions of a 6-partition topic plus one checkpoint record,
// Flush (produce, acks=all), EndTransaction, and the time until a
// read_committed consumer sees the records (marker writes, last stable offset
// advance). Transactions run one after the other, so each is timed alone.
// A franz-go HookBrokerE2E counts and times every request per Kafka API
// (AddPartitionsToTxn is absent when the broker runs transaction protocol v2,
// KIP-890 part 2, where produce adds partitions itself). The same records
// without a transaction (acks=all, idempotent) are the at-least-once row.
func txnProbeMain(args []string) error {
	fs := flag.NewFlagSet("txn", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "host:port")
	n := fs.Int("n", 300, "transactions")
	parts := fs.Int("partitions", 1, "partitions of the data topic each transaction writes to (1-6)")
	backToBack := fs.Bool("back-to-back", false, "begin the next batch as soon as EndTransaction returns, as the relay does, instead of after the consumer saw the batch")
	tv1 := fs.Bool("tv1", false, "cap the client to transaction protocol v1 (explicit AddPartitionsToTxn, ConcurrentTransactionsBackoff 1ms)")
	settle := fs.Bool("settle", false, "after EndTransaction, poll DescribeTransactions until the coordinator completed the commit before the next produce")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return txnProbe(os.Stdout, probeOptions{brokers: *brokers, n: *n, parts: *parts, backToBack: *backToBack, tv1: *tv1, settle: *settle, alo: true})
}

// probeOptions are txnProbe's settings (see txnProbeMain's flags).
type probeOptions struct {
	brokers                      string
	n, parts                     int
	backToBack, tv1, settle, alo bool
}

// txnProbe times o.n batches and writes its tables to w.
func txnProbe(w io.Writer, o probeOptions) error {
	brokers, n, parts, backToBack, tv1, settle := &o.brokers, &o.n, &o.parts, &o.backToBack, &o.tv1, &o.settle
	ctx := context.Background()
	suffix := time.Now().Format("150405.000")
	topic, cpTopic := "probe.data."+suffix, "probe.cp."+suffix
	hook := &e2eHook{byKey: map[int16][]time.Duration{}}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(*brokers))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, topic); err != nil {
		return err
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, cpTopic); err != nil {
		return err
	}
	seen := make(chan int64, 1024)
	cons, err := kgo.NewClient(kgo.SeedBrokers(*brokers), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		for cctx.Err() == nil {
			cons.PollFetches(cctx).EachRecord(func(r *kgo.Record) { seen <- int64(binary.BigEndian.Uint64(r.Value)) })
		}
	}()

	modes := []bool{true}
	if o.alo {
		modes = append(modes, false)
	}
	for _, txn := range modes {
		opts := []kgo.Opt{kgo.SeedBrokers(*brokers), kgo.ProducerLinger(0), kgo.WithHooks(hook),
			kgo.RecordPartitioner(kgo.ManualPartitioner())}
		if txn {
			opts = append(opts, kgo.TransactionalID("probe-"+suffix))
			if *tv1 {
				v := kversion.V4_0_0()
				v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
				v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
				opts = append(opts, kgo.MaxVersions(v), kgo.ConcurrentTransactionsBackoff(time.Millisecond))
			}
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		var tBegin, tFlush, tEnd, tVisible, tTotal []time.Duration
		hook.reset()
		for i := 0; i < *n+20; i++ {
			if i == 20 { // warm-up done: connections, producer id, coordinator
				tBegin, tFlush, tEnd, tVisible, tTotal = nil, nil, nil, nil, nil
				hook.reset()
			}
			t0 := time.Now()
			if txn {
				if err := cl.BeginTransaction(); err != nil {
					return err
				}
			}
			t1 := time.Now()
			for p := 0; p < *parts; p++ {
				v := make([]byte, 8)
				binary.BigEndian.PutUint64(v, uint64(i))
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: v}, nil)
			}
			if txn {
				cl.Produce(ctx, &kgo.Record{Topic: cpTopic, Partition: 0, Value: []byte("checkpoint")}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			t2 := time.Now()
			if txn {
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					return err
				}
			}
			if txn && *settle {
				for {
					d, err := adm.DescribeTransactions(ctx, "probe-"+suffix)
					if err != nil {
						return err
					}
					if st := d["probe-"+suffix].State; st == "CompleteCommit" || st == "Empty" {
						break
					}
				}
			}
			t3 := time.Now()
			for got := 0; got < *parts && !*backToBack; {
				select {
				case v := <-seen:
					if v == int64(i) {
						got++
					}
				case <-time.After(10 * time.Second):
					return fmt.Errorf("transaction %d not visible after 10 s", i)
				}
			}
			t4 := time.Now()
			tBegin, tFlush, tEnd, tVisible, tTotal = append(tBegin, t1.Sub(t0)), append(tFlush, t2.Sub(t1)),
				append(tEnd, t3.Sub(t2)), append(tVisible, t4.Sub(t3)), append(tTotal, t4.Sub(t0))
		}
		cl.Close()
		for len(seen) > 0 {
			<-seen
		}
		mode := "at-least-once (idempotent, acks=all)"
		if txn {
			mode = "exactly-once (transaction + checkpoint record)"
		}
		order := "each begun once the consumer saw the one before"
		if *backToBack {
			order = "back to back, no wait for the consumer"
		}
		if txn && *tv1 {
			order += ", client capped to transaction protocol v1 (AddPartitionsToTxn, ConcurrentTransactionsBackoff 1 ms)"
		}
		if txn && *settle {
			order += ", next produce after DescribeTransactions shows the commit complete (as the relay does)"
		}
		fmt.Fprintf(w, "\n%s, %d partitions of the data topic per batch, %d batches, %s; ms p50 / p90 / p99\n\n", mode, *parts, *n, order)
		fmt.Fprintf(w, "| step | p50 | p90 | p99 |\n|---|---|---|---|\n")
		for _, s := range []struct {
			name string
			d    []time.Duration
		}{{"BeginTransaction (local)", tBegin}, {"produce + Flush", tFlush}, {"EndTransaction(commit)", tEnd},
			{"EndTransaction return to consumer sees it", tVisible}, {"whole batch, begin to visible", tTotal}} {
			fmt.Fprintf(w, "| %s | %s |\n", s.name, quantiles(s.d))
		}
		fmt.Fprintf(w, "\nrequests per batch by Kafka API (franz-go HookBrokerE2E: write + broker + read), ms p50 / p90 / p99:\n\n")
		fmt.Fprintf(w, "| API | requests per batch | p50 | p90 | p99 |\n|---|---|---|---|---|\n")
		for _, k := range hook.keys() {
			d := hook.get(k)
			fmt.Fprintf(w, "| %s | %.2f | %s |\n", kmsg.NameForKey(k), float64(len(d))/float64(*n), quantiles(d))
		}
	}
	return nil
}

func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "- | - | -"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(f float64) float64 { return ms(s[int(f*float64(len(s)-1))]) }
	return strings.Join([]string{fmt.Sprintf("%.2f", q(0.5)), fmt.Sprintf("%.2f", q(0.9)), fmt.Sprintf("%.2f", q(0.99))}, " | ")
}

// e2eHook records each request's end-to-end time by API key.
type e2eHook struct {
	mu    sync.Mutex
	byKey map[int16][]time.Duration
}

func (h *e2eHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if e.Err() != nil {
		return
	}
	h.mu.Lock()
	h.byKey[key] = append(h.byKey[key], e.DurationE2E())
	h.mu.Unlock()
}

func (h *e2eHook) reset() {
	h.mu.Lock()
	clear(h.byKey)
	h.mu.Unlock()
}

func (h *e2eHook) keys() []int16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ks []int16
	for k := range h.byKey {
		if k != 3 && k != 18 && k != 71 && k != 72 { // Metadata, ApiVersions, client telemetry
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func (h *e2eHook) get(k int16) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.byKey[k]...)
}
