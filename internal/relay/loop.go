package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/router"
)

// loop is the state of one attempt, owned by the goroutine in run.
type loop struct {
	r    *Relay
	srv  *binlog.Server
	sink *sink

	// set covers every source transaction fully handed to the sink.
	set    mysql.GTIDSet
	setStr string // set rendered, or "" when it changed since
	// partial: rows of one source transaction already published (committed,
	// or produced into the open batch). Loaded from the checkpoint, it makes
	// a restart skip exactly those rows.
	partial *checkpoint.Partial
	curGTID string // transaction whose rows are being read; "" between transactions
	curRows int64  // routed rows of curGTID seen so far

	batchRecords int
	batchBytes   int
	batchStart   time.Time
	batchTopics  map[string]int

	dirty          bool // position moved since the last checkpoint
	lastCommitTime time.Time
	lastCheckpoint time.Time
	lastProgress   time.Time // progress log
	progressEvents int64
	events         int64 // cumulative published records, carried in checkpoints
	topicCounters  map[string]prometheus.Counter
}

func newLoop(r *Relay, srv *binlog.Server, cp *checkpoint.Checkpoint, from string, s *sink) *loop {
	l := &loop{r: r, srv: srv, sink: s, setStr: from, batchTopics: map[string]int{},
		topicCounters: map[string]prometheus.Counter{}, lastCheckpoint: time.Now(), lastProgress: time.Now()}
	l.set, _ = binlog.ParseSet(srv.Flavor, from) // validated by startPosition
	if cp != nil {
		l.partial = cp.Partial
		l.events = cp.Events
		l.lastCommitTime = cp.CommitTime
	}
	return l
}

// run consumes events until ctx ends (then it commits what it holds) or an
// error ends the attempt.
func (l *loop) run(ctx context.Context, events <-chan []binlog.Event, readErr <-chan error) error {
	cfg := l.r.cfg.Kafka
	tick := time.NewTicker(min(cfg.Batch.MaxWait, cfg.CheckpointInterval, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.r.metrics.Ready.Store(false)
			return l.shutdown()
		case err := <-readErr:
			if ctx.Err() != nil {
				l.r.metrics.Ready.Store(false)
				return l.shutdown()
			}
			if fatal(err) {
				return err
			}
			return fmt.Errorf("%w: %w", errSourceStream, err)
		case batch := <-events:
			for i := range batch {
				if err := l.handle(ctx, &batch[i], i == len(batch)-1 && len(events) == 0); err != nil {
					return err
				}
			}
		case now := <-tick.C:
			if err := l.onTick(ctx, now); err != nil {
				return err
			}
		}
	}
}

func (l *loop) handle(ctx context.Context, ev *binlog.Event, caughtUp bool) error {
	l.r.metrics.BinlogBytes.Add(float64(ev.Size))
	switch ev.Kind {
	case binlog.KindRows:
		return l.rows(ctx, ev)
	case binlog.KindCommit:
		l.r.metrics.SourceTransactions.Inc()
		l.set, l.setStr = ev.Set, ""
		if l.partial != nil && l.partial.GTID == ev.GTID {
			l.partial = nil
		}
		l.curGTID, l.curRows = "", 0
		l.dirty = true
		l.lastCommitTime = ev.Time
		l.r.metrics.SourceLag.Set(time.Since(ev.Time).Seconds())
		if !l.sink.open {
			return nil // a checkpoint-only transaction waits for the tick
		}
		k := l.r.cfg.Kafka.Batch
		if caughtUp || l.batchRecords >= k.MaxRecords || l.batchBytes >= k.MaxBytes || time.Since(l.batchStart) >= k.MaxWait {
			return l.commit(ctx)
		}
	}
	return nil
}

func (l *loop) rows(ctx context.Context, ev *binlog.Event) error {
	if ev.Op != binlog.OpInsert {
		l.r.log.Debug().Str("table", ev.Table.String()).Str("op", ev.Op.String()).Str("gtid", ev.GTID).
			Int("rows", len(ev.Rows)).Msg("ignoring non-insert on outbox table")
		return nil
	}
	if l.curGTID != ev.GTID {
		l.curGTID, l.curRows = ev.GTID, 0
	}
	k := l.r.cfg.Kafka.Batch
	for _, values := range ev.Rows {
		l.curRows++
		if l.partial != nil && l.partial.GTID == ev.GTID && l.curRows <= l.partial.Rows {
			continue // published before the restart
		}
		rec, err := l.r.router.Route(router.Row{Columns: ev.Table.Columns, Values: values, CommitTime: ev.Time})
		if err != nil {
			return fmt.Errorf("route row of %s (event_id %q, gtid %s): %w", ev.Table, rec.EventID, ev.GTID, err)
		}
		if err := l.sink.ensureTopic(ctx, rec.Topic); err != nil {
			return err
		}
		if !l.sink.open {
			l.batchStart = time.Now()
		}
		if err := l.sink.produce(&kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value,
			Headers: rec.Headers, Timestamp: rec.Timestamp}); err != nil {
			return err
		}
		l.batchRecords++
		l.batchBytes += len(rec.Key) + len(rec.Value)
		l.batchTopics[rec.Topic]++
		if l.partial == nil || l.partial.GTID != ev.GTID {
			l.partial = &checkpoint.Partial{GTID: ev.GTID}
		}
		l.partial.Rows = l.curRows
		if l.batchRecords >= k.MaxRecords || l.batchBytes >= k.MaxBytes {
			// One source transaction outgrew the batch: commit the part read so
			// far; the checkpoint's partial says how many rows to skip.
			if err := l.commit(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *loop) onTick(ctx context.Context, now time.Time) error {
	cfg := l.r.cfg.Kafka
	if !l.lastCommitTime.IsZero() {
		l.r.metrics.SourceLag.Set(now.Sub(l.lastCommitTime).Seconds())
	}
	l.progress(now)
	if l.sink.open {
		if l.curGTID == "" && now.Sub(l.batchStart) >= cfg.Batch.MaxWait {
			return l.commit(ctx)
		}
		return nil
	}
	if now.Sub(l.lastCheckpoint) >= cfg.CheckpointInterval {
		// Heartbeat: a checkpoint-only transaction, even when idle, so a
		// restart starts near the head, the binlogs it needs are not purged,
		// and the checkpoint's time shows the relay is alive.
		return l.commit(ctx)
	}
	return nil
}

// progress logs throughput, lag and position at log.progress_interval while
// events flow.
func (l *loop) progress(now time.Time) {
	interval := l.r.cfg.Log.ProgressInterval
	if interval <= 0 || now.Sub(l.lastProgress) < interval {
		return
	}
	n := l.events - l.progressEvents
	if n > 0 {
		el := now.Sub(l.lastProgress).Seconds()
		if l.setStr == "" {
			l.setStr = l.set.String()
		}
		l.r.log.Info().Int64("events", n).Float64("events_per_second", float64(n)/el).
			Float64("lag_seconds", now.Sub(l.lastCommitTime).Seconds()).Str("gtid_set", l.setStr).Msg("progress")
	}
	l.lastProgress, l.progressEvents = now, l.events
}

// commit ends the open batch (or writes a checkpoint-only batch) with the
// current position.
func (l *loop) commit(ctx context.Context) error {
	if l.setStr == "" {
		l.setStr = l.set.String()
	}
	cp := &checkpoint.Checkpoint{
		Name:       l.r.cfg.Name,
		GTIDSet:    l.setStr,
		Flavor:     l.srv.Flavor,
		ServerID:   l.srv.ServerID,
		Host:       l.srv.Addr,
		CommitTime: l.lastCommitTime,
		Time:       time.Now().UTC(),
		Events:     l.events + int64(l.batchRecords),
	}
	if l.partial != nil {
		p := *l.partial
		cp.Partial = &p
	}
	began := time.Now()
	if err := l.sink.commit(ctx, cp); err != nil {
		l.r.metrics.KafkaTransactions.WithLabelValues("abort").Inc()
		return err
	}
	l.r.metrics.KafkaTransactions.WithLabelValues("commit").Inc()
	l.r.metrics.KafkaTxnSeconds.Observe(time.Since(began).Seconds())
	l.r.metrics.BatchRecords.Observe(float64(l.batchRecords))
	l.r.metrics.CheckpointTime.Set(float64(cp.Time.UnixNano()) / 1e9)
	l.r.metrics.SetPosition(cp.GTIDSet)
	for topic, n := range l.batchTopics {
		c := l.topicCounters[topic]
		if c == nil {
			c = l.r.metrics.Events.WithLabelValues(topic, "published")
			l.topicCounters[topic] = c
		}
		c.Add(float64(n))
	}
	clear(l.batchTopics)
	l.events = cp.Events
	l.batchRecords, l.batchBytes = 0, 0
	l.dirty = false
	l.lastCheckpoint = time.Now()
	if cp.Partial != nil && cp.Partial.GTID == l.curGTID {
		hit("after-partial")
	} else {
		hit("after-commit")
	}
	return nil
}

// shutdown commits what the loop holds: records already produced, even in
// the middle of a source transaction, go out with a checkpoint whose partial
// says so.
func (l *loop) shutdown() error {
	if !l.sink.open && !l.dirty {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.r.cfg.Kafka.RequestTimeout)
	defer cancel()
	if err := l.commit(ctx); err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	if err := l.sink.finish(ctx); err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	l.r.log.Info().Str("gtid_set", l.setStr).Int64("events", l.events).Msg("final checkpoint written")
	return nil
}
