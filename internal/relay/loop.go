package relay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/schema"
)

// loop is the state of one attempt, owned by the goroutine in run.
type loop struct {
	r   *Relay
	srv *binlog.Server
	// sink is the lane the batch being built goes to; lanes are all of
	// them, in turn (commit.go: one, or two transactional ids).
	sink  sink
	lanes []sink
	// lease is the term the attempt runs under (nil without an election):
	// once it is lost the loop stops at once and commits nothing.
	lease *ha.Lease

	// set covers every source transaction fully handed to the sink.
	set    mysql.GTIDSet
	setStr string // set rendered, or "" when it changed since: use position()
	// partial: rows of one source transaction already published (committed,
	// or produced into the open batch). Loaded from the checkpoint, it makes
	// a restart skip exactly those rows. GTID "" when there is none.
	partial  checkpoint.Partial
	schema   schema.Tables // captured tables' layout at set
	unsigned schema.Signs  // and their signedness
	// provisional: the tables of schema whose layout awaits its check
	// against a table map (schema.Provisional).
	provisional schema.Provisional
	curGTID     string // transaction whose rows are being read; "" between transactions
	curRows     int64  // routed rows of curGTID seen so far
	// curDeleted counts rows of curGTID deleted from outbox tables, taken as
	// the delete-after-insert pattern while they do not outnumber curRows.
	curDeleted int64

	// maxRecords bounds a batch's records: kafka.batch.max_records, less
	// after Kafka was slow to acknowledge (batchlimit.go); lastBatch: the
	// records of the batch committed last; lastSlow: when a commit last took
	// a quarter of kafka.request_timeout; limitSince: when maxRecords last
	// changed.
	maxRecords, lastBatch int
	// moreRows: rows the reader has already handed over follow the event
	// being handled (later in its hand-off, or a hand-off waiting): a batch
	// cut by its size bound then commits without the settle wait.
	moreRows             bool
	lastSlow, limitSince time.Time

	batchRecords int
	batchBytes   int
	batchStart   time.Time
	batchTopics  map[topicOutcome]int

	// pending: the records of the source transaction being read (curGTID),
	// kept apart until it ends; only then do they join the batch (produced,
	// or held behind a commit in flight). A stop inside the transaction, or
	// SIGTERM, drops them and commits the transactions that ended before
	// it; a transaction larger than the batch joins it in parts (the
	// checkpoint's partial). pendingRows: curRows at the last of them;
	// pendingBytes: their key and value bytes.
	pending      []pendingRecord
	pendingRows  int64
	pendingBytes int
	// batchPart: the batch holds a part of a split transaction (the next
	// commit is a partial one).
	batchPart bool
	// quietDue: the batch is due once the reader stays quiet for
	// catchUpQuiet (catch-up: it caught up with the reader, not the source).
	quietDue bool

	// fingerprint is the last transaction with rows of captured tables that
	// the position covers (carried from the checkpoint, replaced at each such
	// commit; source.Prove checks it on a host before the relay reads it);
	// fpBefore the set just before it, rendered into its Before when a
	// checkpoint first carries it.
	fingerprint *checkpoint.Fingerprint
	fpBefore    mysql.GTIDSet

	dirty          bool // position moved since the last checkpoint
	lastCommitTime time.Time
	lastCheckpoint time.Time
	lastProgress   time.Time // progress log
	progressEvents int64
	events         int64 // cumulative published records, carried in checkpoints
	topicCounters  map[topicOutcome]prometheus.Counter

	// Exactly-once pipelining (commit.go): the Kafka commit in flight, and
	// records routed meanwhile, held until it ends (they belong to the next
	// Kafka transaction). wantCommit: the batch is due as soon as the
	// commit in flight ends (the reader caught up meanwhile).
	inflight   *inflightCommit
	held       []outRecord
	wantCommit bool

	xa xaState // XA transactions read and not yet ended
	// done is, while the loop reads again from before a prepared XA
	// transaction, the position published before the restart: nothing it
	// covers is published again. nil otherwise.
	done     mysql.GTIDSet
	doneGTID string // the GTID replaying last looked up, and its answer
	doneHit  bool
}

func newLoop(r *Relay, srv *binlog.Server, cp *checkpoint.Checkpoint, from string, s sink) (*loop, error) {
	set, err := binlog.ParseSet(srv.Flavor, from)
	if err != nil {
		return nil, fmt.Errorf("start position: %w", err)
	}
	now := time.Now()
	l := &loop{r: r, srv: srv, sink: s, lanes: []sink{s}, set: set, setStr: from, batchTopics: map[topicOutcome]int{},
		topicCounters: map[topicOutcome]prometheus.Counter{}, lastCheckpoint: now, lastProgress: now}
	l.setLimit(r.batchLimit(), now)
	if cp != nil {
		if cp.Partial != nil {
			l.partial = *cp.Partial
		}
		l.events = cp.Events
		l.lastCommitTime = cp.CommitTime
		l.fingerprint = cp.Fingerprint
	}
	// The progress line counts what this attempt publishes, not the
	// pipeline's total the checkpoint carries.
	l.progressEvents = l.events
	l.loadXA(cp)
	if cp != nil && cp.Replays() {
		if l.done, err = binlog.ParseSet(srv.Flavor, cp.GTIDSet); err != nil {
			return nil, fmt.Errorf("checkpoint position: %w", err)
		}
	}
	return l, nil
}

// addLane adds a second sink (newLane: a transactional id of its own);
// batches alternate between the lanes (commit.go).
func (l *loop) addLane(s sink) {
	l.lanes = append(l.lanes, s)
}

// run consumes events until ctx ends (then it commits what it holds) or an
// error ends the attempt. The end of ctx is only looked at between batches:
// the work in hand, a Kafka commit above all, never sees it canceled.
func (l *loop) run(ctx context.Context, events <-chan []binlog.Event, readErr <-chan error) error {
	// Whatever ends the attempt, no commit is left running behind it (the
	// caller aborts the open transaction next) and its end is accounted for.
	return l.settleInflight(l.consume(ctx, events, readErr))
}

// stop ends the attempt with err. Before a stop at a source transaction it
// commits what ended before it (the stopped transaction's own records are
// dropped); when that commit fails, the attempt ends with it instead (not
// fatal: the next one reaches the stop again from the committed checkpoint).
func (l *loop) stop(err error) error {
	if !stopsAtTransaction(err) {
		return err
	}
	l.r.metrics.Ready.Store(false)
	if cerr := l.shutdown(); cerr != nil {
		return fmt.Errorf("commit before the stop: %w (stop, to be reached again: %v)", cerr, err)
	}
	return err
}

// lastRows is the index of the last rows event in batch, -1 without one.
func lastRows(batch []binlog.Event) int {
	for i := len(batch) - 1; i >= 0; i-- {
		if batch[i].Kind == binlog.KindRows {
			return i
		}
	}
	return -1
}

// consume is run's loop.
func (l *loop) consume(ctx context.Context, events <-chan []binlog.Event, readErr <-chan error) error {
	work := context.WithoutCancel(ctx)
	cfg := l.r.cfg.Kafka
	// A quarter of the transaction timeout at most: onTick commits a part
	// of a long source transaction at half of it, well before the whole.
	tick := time.NewTicker(min(cfg.Batch.MaxWait, cfg.CheckpointInterval, cfg.TransactionTimeout/4, time.Second))
	defer tick.Stop()
	quiet := time.NewTimer(time.Hour) // armed by quietDue
	quiet.Stop()
	defer quiet.Stop()
	ls := l.lease
	for {
		select {
		case <-ls.Lost():
			// Not sure to hold the lease any more: stop at once, commit
			// nothing (the sink refuses to); the open transaction is aborted.
			l.r.metrics.Ready.Store(false)
			return ls.Err()
		case <-ctx.Done():
			l.r.metrics.Ready.Store(false)
			if err := ls.Err(); err != nil {
				return err
			}
			return l.shutdown()
		case err := <-readErr:
			// The reader has returned: what it sent before is handled first.
			for len(events) > 0 {
				batch := <-events
				last := lastRows(batch)
				for i := range batch {
					l.moreRows = i < last || len(events) > 0
					if herr := l.handle(work, &batch[i], false); herr != nil {
						return l.stop(herr)
					}
				}
			}
			if fatal(err) {
				// A stop at a transaction the relay cannot publish (even with
				// SIGTERM at the same moment): the transactions that ended
				// before it are committed, so the checkpoint names the
				// transaction an operator acts on; the stopped one's records
				// are dropped.
				return l.stop(err)
			}
			if ctx.Err() != nil {
				l.r.metrics.Ready.Store(false)
				return l.shutdown()
			}
			return fmt.Errorf("%w: %w", errSourceStream, err)
		case batch := <-events:
			l.quietDue = false // the reader was not quiet
			last := lastRows(batch)
			for i := range batch {
				l.moreRows = i < last || len(events) > 0
				if err := l.handle(work, &batch[i], i == len(batch)-1 && len(events) == 0); err != nil {
					return l.stop(err)
				}
			}
			if l.quietDue {
				quiet.Reset(cmp.Or(l.r.quiet, catchUpQuiet))
			}
		case <-quiet.C:
			if err := l.onQuiet(work); err != nil {
				return l.stop(err)
			}
		case res := <-l.inflightDone(): // a commit running in the background
			if err := l.committed(work, res); err != nil {
				return err
			}
		case <-l.inflightFlushed(): // two lanes
			if err := l.release(work); err != nil {
				return err
			}
		case <-l.sink.acked(): // a sealed batch may be acknowledged
			cp, err := l.sink.drain()
			if err != nil {
				return err
			}
			l.written(cp)
		case now := <-tick.C:
			if err := l.onTick(work, now); err != nil {
				return err
			}
		}
	}
}

func (l *loop) handle(ctx context.Context, ev *binlog.Event, caughtUp bool) error {
	l.r.metrics.BinlogBytes.Add(float64(ev.Size))
	l.r.metrics.Progress()
	if ev.Kind != binlog.KindHeartbeat {
		l.r.metrics.SourceEvent(ev.Time) // the first event after a heartbeat: behind again
	}
	switch ev.Kind {
	case binlog.KindRows:
		if ev.XID != "" {
			l.holdXA(ev) // published at its XA COMMIT
			return nil
		}
		if l.replaying(ev.GTID) {
			return nil
		}
		return l.rows(ctx, ev)
	case binlog.KindDDL:
		l.r.log.Info().Str("gtid", ev.GTID).Msg(ev.Note)
	case binlog.KindWarning:
		l.r.log.Warn().Str("gtid", ev.GTID).Msg(ev.Note)
	case binlog.KindIgnored:
		l.r.log.Debug().Str("gtid", ev.GTID).Msg(ev.Note)
	case binlog.KindHeartbeat:
		l.r.metrics.SourceAtHead() // everything the server had is handled
		// The reader is at the server's head: a batch waiting for a quiet
		// reader (catch-up; a hand-off clears quietDue) is due now, not at
		// max_wait.
		l.quietDue = false
		return l.commitDue(ctx)
	case binlog.KindPrepare, binlog.KindRollback:
		if len(l.pending) > 0 {
			// An XA group's rows are held by xid (holdXA), never pending.
			return fmt.Errorf("%w: %d outbox rows of %s outside its XA transaction at its XA %s", binlog.ErrUnframed,
				len(l.pending), l.curGTID, map[binlog.Kind]string{binlog.KindPrepare: "PREPARE", binlog.KindRollback: "ROLLBACK"}[ev.Kind])
		}
		if ev.Kind == binlog.KindPrepare {
			l.prepareXA(ev)
		} else {
			l.endXA(ev.XID)
		}
		l.advance(ev)
	case binlog.KindCommit:
		if ev.XID != "" {
			if err := l.commitXA(ctx, ev); err != nil {
				return err
			}
		}
		if err := l.flushPending(ctx, false); err != nil {
			return err
		}
		if ev.Digest != nil && ev.XID == "" {
			l.fingerprint = &checkpoint.Fingerprint{GTID: ev.GTID, Tables: ev.Digest.Tables, Rows: int64(ev.Digest.Rows), Digest: ev.Digest.Sum}
			l.fpBefore = l.set
		}
		l.advance(ev)
		now := time.Now()
		if !l.batchOpen() {
			return nil // a checkpoint-only transaction waits for the tick
		}
		k := l.r.cfg.Kafka.Batch
		if l.batchFull() || now.Sub(l.batchStart) >= k.MaxWait {
			return l.startCommit(ctx)
		}
		if caughtUp && !l.wantCommit && now.Sub(ev.Time) >= catchUpLag {
			// Far behind the source: the loop caught up with the reader for a
			// moment, not with the source. Committing at each such moment
			// makes hundreds of small Kafka transactions (each costs the
			// broker its markers and transaction-log writes); the batch
			// commits once the reader stays quiet, or at its bounds.
			l.quietDue = true
			return nil
		}
		if caughtUp || l.wantCommit {
			return l.commitDue(ctx)
		}
	}
	return nil
}

// catchUpLag is how far behind the source (a transaction's commit time
// against the relay's clock) the loop is catching up: a moment with nothing
// handed over then only makes the batch due once the reader stays quiet for
// catchUpQuiet. Nearer the source, a batch commits as soon as the reader has
// nothing more (latency). A relay clock this far ahead of the source's only
// costs catchUpQuiet per batch.
const (
	catchUpLag   = 5 * time.Second
	catchUpQuiet = time.Millisecond
)

// onQuiet: the reader handed over nothing for catchUpQuiet since the batch
// became due in catch-up: commit it (or as soon as the one in flight ends).
func (l *loop) onQuiet(ctx context.Context) error {
	if !l.quietDue {
		return nil
	}
	l.quietDue = false
	return l.commitDue(ctx)
}

// commitDue: the open batch is due; it is committed now, or as soon as the
// one in flight ends.
func (l *loop) commitDue(ctx context.Context) error {
	if !l.batchOpen() {
		return nil
	}
	if l.inflight != nil {
		l.wantCommit = true
		return nil
	}
	return l.startCommit(ctx)
}

// advance moves the position past ev, the end of a source transaction (a
// commit, an XA prepare or an XA rollback).
func (l *loop) advance(ev *binlog.Event) {
	l.r.metrics.SourceTransactions.Inc()
	l.set, l.setStr, l.schema, l.unsigned = ev.Set, "", ev.Schema, ev.Unsigned
	l.provisional = ev.Provisional
	if l.partial.GTID == ev.GTID {
		l.partial = checkpoint.Partial{}
	}
	l.curGTID, l.curRows, l.curDeleted = "", 0, 0
	l.dirty = true
	l.lastCommitTime = ev.Time
	l.r.metrics.SourceRead(ev.Time) // behind until the reader passes on a heartbeat
	l.advanced(ev.Set)
}

func (l *loop) onTick(ctx context.Context, now time.Time) error {
	cfg := l.r.cfg.Kafka
	if err := l.sink.placements().changedWhileRunning(); err != nil {
		return err
	}
	l.progress(now)
	l.recoverLimit(now)
	cp, err := l.sink.drain() // a checkpoint of acknowledged batches, if any
	if err != nil {
		return err
	}
	l.written(cp)
	if l.inflight != nil {
		return nil // bounded by the sink's timeout; its end is handled in run
	}
	if l.batchOpen() {
		// A source transaction still being read may be committed in part
		// (the checkpoint's partial says how far) when the Kafka transaction
		// has been open for half its timeout: one outbox row, then minutes of
		// other tables' rows, must not let the broker abort it.
		// The batch holds ended transactions only (a part of a split one is
		// committed as soon as it joins): max_wait holds while a
		// transaction is being read too.
		if now.Sub(l.batchStart) >= cfg.Batch.MaxWait || l.sink.openFor() >= cfg.TransactionTimeout/2 {
			return l.commit(ctx)
		}
		return nil
	}
	if l.done != nil {
		return nil // reading again what was published: the checkpoint stays
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
// events flow: events is what this process published since the last line
// (never the checkpoint's total), lag_seconds the
// outbox_relay_source_lag_seconds gauge (0 once the relay has read all the
// server has, however old the last commit).
func (l *loop) progress(now time.Time) {
	interval := l.r.cfg.Log.ProgressInterval
	if interval <= 0 || now.Sub(l.lastProgress) < interval {
		return
	}
	n := l.events - l.progressEvents
	if n > 0 {
		el := now.Sub(l.lastProgress).Seconds()
		// rounded: a tenth of an event per second, a millisecond of lag
		ev := l.r.log.Info().Int64("events", n).Float64("events_per_second", math.Round(float64(n)/el*10)/10)
		if lag := l.r.metrics.LagSeconds(); !math.IsNaN(lag) {
			ev = ev.Float64("lag_seconds", math.Round(lag*1000)/1000)
		}
		ev.Str("gtid_set", l.position()).Msg("progress")
	}
	l.lastProgress, l.progressEvents = now, l.events
}

// written notes a checkpoint the sink wrote (nil: none).
func (l *loop) written(cp *checkpoint.Checkpoint) {
	if cp == nil {
		return
	}
	l.r.metrics.Progress()
	l.r.metrics.CheckpointKnown(cp.Time, cp.CommitTime)
	l.r.metrics.SetPosition(cp.GTIDSet)
	l.r.noteCheckpoint(cp, "")
}

// shutdown commits what the loop holds of the transactions that ended (and
// the parts of a large one that joined the batch, with a checkpoint whose
// partial says so); the pending records of the transaction being read are
// dropped, and the next attempt reads it again. It then waits until the last
// checkpoint is durable and visible to read_committed readers.
func (l *loop) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.r.cfg.Kafka.RequestTimeout)
	defer cancel()
	l.dropPending() // the transaction being read: read again from the checkpoint
	if err := l.commitEnded(ctx); err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	cp, err := l.sink.finish(ctx)
	if err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	l.written(cp)
	for _, s := range l.lanes { // the last checkpoint is in either
		if err := s.awaitVisible(ctx); err != nil {
			l.r.log.Warn().Err(err).Msg("final checkpoint committed; readers see it once an older open transaction on the checkpoint topic ends")
			break
		}
	}
	l.r.log.Info().Str("gtid_set", l.position()).Int64("events", l.events).Msg("final checkpoint written")
	return nil
}

// commitEnded commits, and waits for, what the loop holds of the source
// transactions that ended (the batch, or only a position that moved), if
// anything. The pending records of the transaction being read stay out.
func (l *loop) commitEnded(ctx context.Context) error {
	if err := l.awaitCommit(ctx); err != nil {
		return err
	}
	if l.batchOpen() || (l.dirty && l.done == nil) {
		return l.commit(ctx)
	}
	return nil
}

// lastFingerprint is the fingerprint a checkpoint written now carries.
func (l *loop) lastFingerprint() *checkpoint.Fingerprint {
	if l.fpBefore != nil {
		l.fingerprint.Before, l.fpBefore = l.fpBefore.String(), nil
	}
	return l.fingerprint
}

// position is set rendered in the server's notation, rendered once per change.
func (l *loop) position() string {
	if l.setStr == "" {
		l.setStr = l.set.String()
	}
	return l.setStr
}
