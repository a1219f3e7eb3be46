package audit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
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
	// NoCheckpoint says, when there is no checkpoint, why (a first start,
	// a reset: checkpoint.Judgement.Say); "" when there is one.
	NoCheckpoint string
	// Unkeyed are the tables without a primary key whose rows, the relay
	// being behind, could not be told apart: their rows without a record
	// count as missing.
	Unkeyed []string
}

// PendingSentence says what is pending: "pending: N rows not yet
// published, oldest committed at T" (without T when there is no
// checkpoint, saying why instead).
func (r Result) PendingSentence() string {
	s := fmt.Sprintf("pending: %d rows not yet published", r.Pending.Count)
	switch {
	case r.PendingOldest != nil:
		s += ", oldest committed at " + r.PendingOldest.Format(time.RFC3339)
	case r.NoCheckpoint != "":
		s += " (" + r.NoCheckpoint + ")"
	}
	return s
}

// Source is the server an audit reads: a client connection to it, the
// settings its binlog is read with (source.* with the command's --user and
// password) and its address.
type Source struct {
	Conn   *binlog.Conn
	Config binlog.Config
	Addr   string
}

// Run audits cfg's pipeline over o's window: it judges the committed
// checkpoint as `run` does (a lost one is its error: checkpoint.ErrLost),
// reads the captured tables' rows on db (Run sets its session to UTC),
// waits for the committed checkpoint to cover them, and, when it does not,
// reads the binlog after it to tell the rows past it (pending) from those
// it covers (missing when without a record); then it reads the topics and
// returns the report. Read-only: it writes nothing anywhere.
func Run(ctx context.Context, cfg config.Config, db Source, o Options) (Result, error) {
	zone, err := source.UTCSession(db.Conn)
	if err != nil {
		return Result{}, err
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return Result{}, err
	}
	store := k.CheckpointStore()
	jctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout+checkpoint.DefaultStableWait)
	loaded, judged, err := ha.LoadJudged(jctx, cfg, k, store)
	cancel()
	if err != nil {
		return Result{}, fmt.Errorf("audit: %w", err)
	}
	if judged.Err != nil {
		return Result{}, judged.Err // lost: what run refuses to start on
	}
	src := &tables{conn: db.Conn, cfg: cfg, zone: zone, timeColumn: o.TimeColumn, topics: map[string]bool{}}
	// Behind already: keep each row's key, to tell the rows past the
	// checkpoint from the others (beyond.go). Caught up: the checkpoint
	// will most likely cover every row read, and no key is kept; if it
	// does not after all, the rows are read again with their keys.
	keyed := false
	if head, flavor, err := source.Executed(db.Conn); err == nil && loaded.Checkpoint != nil {
		keyed = !covers(loaded.Checkpoint, head, flavor)
	}
	for {
		w, err := readWindow(ctx, cfg, db, src, store, o, keyed)
		if err != nil {
			return Result{}, err
		}
		if w.facts.Coverage == CoversAllBut && w.keys == nil {
			keyed = true
			continue
		}
		return finish(ctx, cfg, k, src, w, judged, o)
	}
}

// window is what one read of the window's rows learned.
type window struct {
	a       *Auditor
	keys    *rowKeys // nil when the rows' keys were not kept
	head    string
	cp      *checkpoint.Checkpoint
	facts   Facts
	unkeyed []string
}

// readWindow reads the window's rows (with their keys when keyed), the
// executed set after them, and waits up to o.Wait for the committed
// checkpoint to contain it. When it does not, and the keys were kept, it
// reads the binlog after the checkpoint up to that set for the rows past
// it (Facts.Beyond).
func readWindow(ctx context.Context, cfg config.Config, db Source, src *tables, store *checkpoint.Store, o Options, keyed bool) (window, error) {
	w := window{a: New(Window{Since: o.Since, Until: o.Until, Margin: o.Margin})}
	pks := map[string][]string{}
	if keyed {
		w.keys = newRowKeys()
	}
	for _, t := range cfg.Source.Tables {
		var pk []string
		if keyed {
			var err error
			if pk, err = source.PrimaryKey(db.Conn, t); err != nil {
				return w, fmt.Errorf("audit %s: %w", t, err)
			}
			if len(pk) == 0 {
				w.unkeyed = append(w.unkeyed, t)
			}
			pks[t] = pk
		}
		if err := src.rows(t, o.Since, o.Until, pk, func(id, key []byte) {
			w.a.RowBytes(id)
			if key != nil {
				w.keys.add(key, id)
			}
			if o.Progress != nil && w.a.Rows()%100000 == 0 {
				o.Progress(w.a.Rows())
			}
		}); err != nil {
			return w, err
		}
	}
	// Every row read was committed before the executed set read now; the
	// checkpoint containing it covers them all.
	head, flavor, err := source.Executed(db.Conn)
	if err != nil {
		return w, fmt.Errorf("audit: %w", err)
	}
	w.head = head
	covered, cp, err := WaitCovered(ctx, cfg, store, head, flavor, o.Wait, "the audited server")
	if err != nil {
		return w, fmt.Errorf("audit: %w", err)
	}
	w.cp = cp
	switch {
	case covered:
		w.facts.Coverage = CoversAll
	case cp == nil:
		w.facts.Coverage = CoversNone
	default:
		w.facts.Coverage = CoversAllBut
		if w.keys == nil {
			return w, nil // read again, with the keys
		}
		p, err := readPast(ctx, cfg, db, cp, head, pks, w.keys.has)
		if err != nil {
			return w, fmt.Errorf("audit: tell the rows past the checkpoint %s from those it covers: %w", cp.GTIDSet, err)
		}
		w.facts.Beyond = w.keys.beyond(p.keys)
	}
	return w, nil
}

// unmoved reports whether the committed checkpoint is still cp: the same
// position, and the same part of a split transaction.
func unmoved(ctx context.Context, cfg config.Config, store *checkpoint.Store, cp *checkpoint.Checkpoint) (bool, error) {
	lctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout+checkpoint.DefaultStableWait)
	defer cancel()
	now, err := store.Load(lctx, cfg.Name)
	if err != nil || now == nil {
		return false, err
	}
	samePart := (now.Partial == nil) == (cp.Partial == nil) && (now.Partial == nil || *now.Partial == *cp.Partial)
	return now.GTIDSet == cp.GTIDSet && samePart, nil
}

// covers reports whether cp's GTID set contains head, a set of flavor.
func covers(cp *checkpoint.Checkpoint, head, flavor string) bool {
	if cp == nil || cp.Flavor != flavor {
		return false
	}
	want, err1 := binlog.ParseSet(flavor, head)
	have, err2 := binlog.ParseSet(flavor, cp.GTIDSet)
	return err1 == nil && err2 == nil && have.Contain(want)
}

// finish reads the topics for the window w read and returns the report.
func finish(ctx context.Context, cfg config.Config, k clients.Kafka, src *tables, w window, judged checkpoint.Judgement, o Options) (Result, error) {
	a := w.a
	dlq := DeadLetterTopics(cfg)
	topics := src.topicList(dlq, o.Topics)
	dead := map[string]bool{}
	for _, t := range dlq {
		dead[t] = true
	}
	// The end offsets are taken once the checkpoint was read: every record
	// of a row it covers is below them.
	from, ends, err := clients.Range(ctx, k.Admin(), cfg.Kafka.RequestTimeout, topics, o.Since.Add(-o.Margin), o.Wait, o.Warn)
	if err != nil {
		return Result{}, fmt.Errorf("audit: %w", err)
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
	f := w.facts
	f.Found, f.Oldest, f.MaxIDs = found, oldest, o.MaxIDs
	if f.Coverage == CoversAllBut && cfg.Kafka.Delivery == config.ExactlyOnce {
		// Read after the records: unmoved, no record read is of a row past it.
		f.Settled, err = unmoved(ctx, cfg, k.CheckpointStore(), w.cp)
		if err != nil {
			return Result{}, fmt.Errorf("audit: %w", err)
		}
	}
	res := Result{Report: a.Report(f), Tables: cfg.Source.Tables, Topics: topics, Executed: w.head}
	switch {
	case w.cp != nil:
		res.Checkpoint = w.cp.GTIDSet
	case judged.Starts():
		res.NoCheckpoint = judged.Say
	default:
		res.NoCheckpoint = "no checkpoint"
	}
	if f.Coverage == CoversAllBut && len(w.unkeyed) > 0 {
		res.Unkeyed = w.unkeyed
		if o.Warn != nil {
			o.Warn(fmt.Sprintf("%s: no primary key: the relay being behind, audit cannot tell which of their rows the checkpoint covers; "+
				"their rows without a record count as missing (add a primary key)", strings.Join(w.unkeyed, ", ")))
		}
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
