package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// ReplayedHeader marks a deliberate second copy of a record (replay,
// dead-letter replay): never a duplicate.
const ReplayedHeader = "replayed"

// Options are one audit run's window and limits.
type Options struct {
	Since, Until time.Time     // Until zero: no end
	Margin       time.Duration // records are read from Since - Margin
	Wait         time.Duration // for the checkpoint to cover the rows, and for open transactions
	MaxIDs       int           // 0: DefaultMaxIDs
	TimeColumn   string        // "": router timestamp_column, else created_at
	Topics       []string      // read for phantoms besides the routed and dead-letter topics
	// Progress, when set, is called every 100,000 rows read.
	Progress func(rows int)
	// Warn, when set, receives what the run goes on past (open
	// transactions holding a topic back).
	Warn func(msg string)
}

// Result is a run's report and what it read.
type Result struct {
	Report
	Tables     []string
	Topics     []string
	Checkpoint string // the committed checkpoint's GTID set ("" when none)
	Executed   string // the source's executed GTID set when the rows were read
}

// Run audits cfg's pipeline over o's window: it reads the captured tables'
// rows on conn (a client connection to the source; Run sets its session
// to UTC), waits for the committed checkpoint to cover them, reads the
// topics, and returns the report. Read-only: it writes nothing anywhere.
func Run(ctx context.Context, cfg config.Config, conn *client.Conn, o Options) (Result, error) {
	zone, err := source.UTCSession(conn)
	if err != nil {
		return Result{}, err
	}
	a := New(Window{Since: o.Since, Until: o.Until, Margin: o.Margin})
	src := &tables{conn: conn, cfg: cfg, zone: zone, timeColumn: o.TimeColumn, topics: map[string]bool{}}
	for _, t := range cfg.Source.Tables {
		if err := src.rows(t, o.Since, o.Until, func(id []byte) {
			a.RowBytes(id)
			if o.Progress != nil && a.Rows()%100000 == 0 {
				o.Progress(a.Rows())
			}
		}); err != nil {
			return Result{}, err
		}
	}
	// Every row read was committed before the executed set read now; the
	// checkpoint containing it covers them all.
	head, flavor, err := source.Executed(conn)
	if err != nil {
		return Result{}, fmt.Errorf("audit: %w", err)
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return Result{}, err
	}
	covered, cp, err := WaitCovered(ctx, cfg, k.CheckpointStore(), head, flavor, o.Wait, "the audited server")
	if err != nil {
		return Result{}, fmt.Errorf("audit: %w", err)
	}
	dlq := DeadLetterTopics(cfg)
	topics := src.topicList(dlq, o.Topics)
	dead := map[string]bool{}
	for _, t := range dlq {
		dead[t] = true
	}
	// The end offsets are taken once the checkpoint covers the rows: every
	// record of a covered row is below them.
	from, ends, err := offsets(ctx, cfg, k.Admin(), topics, o.Since.Add(-o.Margin), o.Wait, o.Warn)
	if err != nil {
		return Result{}, err
	}
	// Small fetches, one at a time: a fetch's records are decompressed and
	// decoded at once (JSON payloads compress tenfold: 1 MB fetched is some
	// 10 MB of records), and nothing of them is kept but each one's id.
	if err := clients.ReadRange(ctx, k, ends, from, func(r *kgo.Record) {
		a.Record(Record{ID: headerValue(r, "id"), Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Timestamp: r.Timestamp, Replayed: hasHeader(r, ReplayedHeader), DeadLetter: dead[r.Topic]})
	}, kgo.FetchMaxBytes(1<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.MaxConcurrentFetches(1)); err != nil {
		return Result{}, fmt.Errorf("audit: %w", err)
	}
	found, err := src.lookup(a.Unmatched())
	if err != nil {
		return Result{}, err
	}
	oldest, err := src.oldest()
	if err != nil {
		return Result{}, err
	}
	res := Result{Report: a.Report(Facts{Covered: covered, Found: found, Oldest: oldest, MaxIDs: o.MaxIDs}),
		Tables: cfg.Source.Tables, Topics: topics, Executed: head}
	if cp != nil {
		res.Checkpoint = cp.GTIDSet
	}
	return res, nil
}

// DeadLetterTopics are the dead-letter topics of cfg's tables.
func DeadLetterTopics(cfg config.Config) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range cfg.Source.Tables {
		topic := cfg.Router.For(t).DeadLetterTopic
		if topic == "" {
			topic = "outbox-relay.dead-letter." + cfg.Name
		}
		if !seen[topic] {
			seen[topic] = true
			out = append(out, topic)
		}
	}
	return out
}

// WaitCovered waits up to wait for the committed checkpoint of cfg's
// pipeline to contain head, the GTID set server (what a mismatch names:
// "the audited server") has executed; it reports whether it does, and the
// checkpoint. prune waits the same way before it deletes.
func WaitCovered(ctx context.Context, cfg config.Config, store *checkpoint.Store, head, flavor string, wait time.Duration, server string) (bool, *checkpoint.Checkpoint, error) {
	want, err := binlog.ParseSet(flavor, head)
	if err != nil {
		return false, nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		lctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout+checkpoint.DefaultStableWait)
		cp, err := store.Load(lctx, cfg.Name)
		cancel()
		if err != nil {
			return false, nil, fmt.Errorf("load checkpoint: %w", err)
		}
		if cp != nil {
			if cp.Flavor != flavor {
				return false, cp, fmt.Errorf("the checkpoint is of a %s server, %s is %s", cp.Flavor, server, flavor)
			}
			have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
			if err != nil {
				return false, cp, err
			}
			if have.Contain(want) {
				return true, cp, nil
			}
		}
		if time.Now().After(deadline) {
			return false, cp, nil
		}
		select {
		case <-ctx.Done():
			return false, cp, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// offsets returns, for each partition of topics, the first offset at or
// after from and the end offset: the high watermark now, once the last
// stable offset has reached it (every transaction open now has ended;
// waiting up to wait, else the last stable offset, with a warning).
func offsets(ctx context.Context, cfg config.Config, kopts []kgo.Opt, topics []string, from time.Time, wait time.Duration, warn func(string)) (map[string]map[int32]int64, map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list := func(f func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[string]map[int32]int64, error) {
		cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
		defer cancel()
		l, err := f(cctx, topics...)
		if err != nil {
			return nil, fmt.Errorf("audit: list offsets: %w", err)
		}
		out := map[string]map[int32]int64{}
		var lerr error
		l.Each(func(o kadm.ListedOffset) {
			if o.Partition < 0 || o.Err != nil {
				if o.Err != nil && o.Partition >= 0 {
					lerr = fmt.Errorf("audit: list offsets of %s[%d]: %w", o.Topic, o.Partition, o.Err)
				}
				return // a topic that does not exist: nothing to read
			}
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = o.Offset
		})
		return out, lerr
	}
	ends, err := list(adm.ListEndOffsets)
	if err != nil {
		return nil, nil, err
	}
	starts, err := list(func(c context.Context, t ...string) (kadm.ListedOffsets, error) {
		return adm.ListOffsetsAfterMilli(c, from.UnixMilli(), t...)
	})
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		stable, err := list(adm.ListCommittedOffsets)
		if err != nil {
			return nil, nil, err
		}
		var held []string
		for t, ps := range ends {
			for p, end := range ps {
				if stable[t][p] < end {
					held = append(held, fmt.Sprintf("%s[%d]", t, p))
				}
			}
		}
		if len(held) == 0 {
			return starts, ends, nil
		}
		if time.Now().After(deadline) {
			sort.Strings(held)
			if warn != nil {
				warn(fmt.Sprintf("open transactions hold back %s for more than %s: reading up to their last stable offsets", strings.Join(held, ", "), wait))
			}
			return starts, stable, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func hasHeader(r *kgo.Record, key string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}
