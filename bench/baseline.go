package main

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/twmb/franz-go/pkg/kgo"
)

// baselineMain is the naive relay the report compares against: read the
// binlog from a GTID set, produce each outbox INSERT asynchronously (the
// relay's record: key, value, id and type headers, the commit's time), exit
// when n records are acknowledged. No checkpoint, no transactions, no
// routing beyond picking columns by position.
func baselineMain(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	rf := replicaFlags(fs)
	db := fs.String("db", "", "database of the outbox table")
	brokers := fs.String("brokers", "", "")
	prefix := fs.String("topic-prefix", "", "")
	n := fs.Int64("n", 0, "records to publish before exiting")
	if err := fs.Parse(args); err != nil {
		return err
	}
	syncer, stream, err := rf.start(replication.BinlogSyncerConfig{ServerID: 9999})
	if err != nil {
		return err
	}
	defer syncer.Close()
	cl, err := kgo.NewClient(baselineOpts(*brokers)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var acked, failed atomic.Int64
	done := make(chan struct{})
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
		if acked.Add(1) == *n {
			close(done)
		}
	}
	ctx := context.Background()
	var produced int64
	for produced < *n {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			return err
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || string(re.Table.Schema) != *db || string(re.Table.Table) != "outbox" || re.Type() != replication.EnumRowsEventTypeInsert {
			continue
		}
		for _, row := range re.Rows {
			// id, event_id, aggregate_type, aggregate_id, event_type, payload, created_at
			// The relay's record: key, value, headers id and type, the
			// source transaction's time.
			rec := &kgo.Record{
				Topic: *prefix + str(row[2]),
				Key:   []byte(str(row[3])),
				Value: []byte(str(row[5])),
				Headers: []kgo.RecordHeader{
					{Key: "id", Value: []byte(str(row[1]))},
					{Key: "type", Value: []byte(str(row[4]))},
				},
				Timestamp: time.Unix(int64(ev.Header.Timestamp), 0),
			}
			cl.Produce(ctx, rec, promise)
			produced++
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("only %d of %d acknowledged", acked.Load(), *n)
	}
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d records failed", f)
	}
	return nil
}

// baselineSettings describes baselineOpts for the report.
const baselineSettings = "franz-go `ProducerLinger(5ms)`, `MaxBufferedRecords(65536)`, `ProducerBatchMaxBytes` 1 MB (default), acks=all, idempotent and snappy compression (franz-go defaults; the relay also compresses with snappy by default), " +
	"murmur2 key partitioning (default); go-mysql `BinlogSyncer` defaults (event cache of 10,240 events), every row decoded; the relay's records (key, value, `id` and `type` headers, the commit's time); no checkpoint, no transactions"

// baselineOpts are the baseline's producer settings, tuned for catch-up
// throughput (a linger and a buffer deep enough that Produce never blocks
// while batches fill) without giving up acks=all or idempotence.
func baselineOpts(brokers string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(65536),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
}

func str(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []byte:
		return string(t)
	default:
		return fmt.Sprint(t)
	}
}
