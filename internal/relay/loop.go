package relay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
)

// The loop is the pipeline of one attempt, on one goroutine: the reader's
// events go one way through it, and out to the delivery.
//
//	events --> assemble (assemble.go, xa.go) --> route (route.go, recordcheck.go; catalog.go)
//	       --> the transaction's records (pending.go) --> the batch (batch.go) --> delivery (delivery.go)
//
// The only ways back are the delivery's committed stream (metrics and the
// pipeline's identity: written) and its back-pressure on send.

// loop is the state of one attempt, owned by the goroutine in run.
type loop struct {
	r   *Relay
	srv *binlog.Server
	// d takes the batches to Kafka (delivery.go); topics is what the
	// attempt knows of the topics written to (catalog.go), which the route
	// step asks (route.go).
	d      delivery
	topics *catalog
	route  *routing
	// lease is the term the attempt runs under (nil without an election):
	// once it is lost the loop stops at once and commits nothing.
	lease *ha.Lease

	asm   *assembler  // the source transactions read (assemble.go)
	pos   position    // how far they are handed over (position.go)
	txn   pendingTxn  // the records of the transaction being read (pending.go)
	batch batchPolicy // the open batch and when it ends (batch.go)
	// lastBatch: the records of the batch sealed last (batchlimit.go).
	lastBatch int
	// moreRows: rows the reader has already handed over follow the event
	// being handled (later in its hand-off, or a hand-off waiting): a batch
	// cut by its size bound then commits without the settle wait.
	moreRows bool
	// sealing: the last seal is in flight (commit.go): the next batch ends
	// only once the committed stream has answered for it.
	sealing bool
	prog    progress
	// release gives a hand-off of the reader's back once every event of it
	// is handled (binlog.Reader.Release); nil: none.
	release func([]binlog.Event)
}

// progress is what the progress line last said.
type progress struct {
	at     time.Time
	events int64 // published as of then
}

func newLoop(r *Relay, srv *binlog.Server, cp *checkpoint.Checkpoint, from string, d delivery, topics *catalog) (*loop, error) {
	pos, err := newPosition(srv.Flavor, from, cp)
	if err != nil {
		return nil, err
	}
	asm, err := newAssembler(srv.Flavor, cp, r.metrics, r.log)
	if err != nil {
		return nil, err
	}
	route := &routing{routes: r.routes, topics: topics, spans: r.spans, metrics: r.metrics, log: r.log}
	l := &loop{r: r, srv: srv, d: d, topics: topics, route: route, asm: asm, pos: pos,
		batch: newBatchPolicy(r.cfg.Kafka, r.batchLimit(), time.Now)}
	// The progress line counts what this attempt publishes, not the
	// pipeline's total the checkpoint carries.
	l.prog = progress{at: time.Now(), events: pos.events}
	return l, nil
}

// run consumes events until ctx ends (then it commits what it holds), fail
// ends (the attempt's context: its cause, a lost lease above all, ends the
// loop at once, committing nothing) or an error ends the attempt. The end
// of ctx is only looked at between batches: the work in hand, a Kafka
// commit above all, never sees it canceled.
func (l *loop) run(ctx, fail context.Context, events <-chan []binlog.Event, readErr <-chan error) error {
	// Whatever ends the attempt, no commit is left running behind it (the
	// caller aborts the open transaction next) and its end is accounted for.
	return l.settleInflight(l.consume(ctx, fail, events, readErr))
}

// stop ends the attempt with err. Before a stop at a source transaction it
// commits what ended before it (the stopped transaction's own records are
// dropped); when that commit fails, the attempt ends with it instead (not
// fatal: the next one reaches the stop again from the committed checkpoint).
func (l *loop) stop(err error) error {
	if !errclass.StopsAtTransaction(err) {
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
func (l *loop) consume(ctx, fail context.Context, events <-chan []binlog.Event, readErr <-chan error) error {
	work := context.WithoutCancel(ctx)
	cfg := l.r.cfg.Kafka
	// A quarter of the transaction timeout at most: onTick commits a part
	// of a long source transaction at half of it, well before the whole.
	tick := time.NewTicker(min(cfg.Batch.MaxWait, cfg.CheckpointInterval, cfg.TransactionTimeout/4, time.Second))
	defer tick.Stop()
	quiet := time.NewTimer(time.Hour) // armed when the batch waits for a quiet reader
	quiet.Stop()
	defer quiet.Stop()
	ls := l.lease
	for {
		select {
		case <-fail.Done():
			// Not sure to hold the lease any more (the cause): stop at
			// once, commit nothing (the delivery refuses to); the open
			// transaction is aborted.
			l.r.metrics.Ready.Store(false)
			return context.Cause(fail)
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
				l.took(batch)
				last := lastRows(batch)
				for i := range batch {
					l.moreRows = i < last || len(events) > 0
					if herr := l.handle(work, &batch[i], false); herr != nil {
						return l.stop(herr)
					}
				}
				l.handled(batch)
			}
			if errclass.Fatal(err) {
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
			l.batch.quiet = false // the reader was not quiet
			l.took(batch)
			last := lastRows(batch)
			for i := range batch {
				l.moreRows = i < last || len(events) > 0
				if err := l.handle(work, &batch[i], i == len(batch)-1 && len(events) == 0); err != nil {
					return l.stop(err)
				}
			}
			l.handled(batch)
			if l.batch.quiet {
				quiet.Reset(cmp.Or(l.r.quiet, catchUpQuiet))
			}
		case <-quiet.C:
			// The reader handed over nothing for the quiet window since the
			// batch became due in catch-up: commit it (or as soon as the
			// one in flight ends).
			if l.batch.quietOver() {
				if err := l.commitDue(work); err != nil {
					return l.stop(err)
				}
			}
		case c := <-l.d.committed():
			if err := l.onCommitted(work, c); err != nil {
				return err
			}
		case now := <-tick.C:
			if err := l.onTick(work, now); err != nil {
				return err
			}
		}
	}
}

// took counts a hand-off of the reader's (its binlog bytes) and notes
// the progress, once for all its events.
func (l *loop) took(batch []binlog.Event) {
	size := 0
	for i := range batch {
		size += batch[i].Size
	}
	l.r.metrics.BinlogBytes.Add(float64(size))
	l.r.metrics.Progress()
	traceTook()
}

// handled gives batch back to the reader: every event of it is handled,
// and nothing of the loop points into it (an XA transaction's rows are
// copied: assembler.holdXA).
func (l *loop) handled(batch []binlog.Event) {
	if l.release != nil {
		l.release(batch)
	}
}

func (l *loop) handle(ctx context.Context, ev *binlog.Event, caughtUp bool) error {
	if ev.Kind != binlog.KindHeartbeat {
		l.r.metrics.SourceEvent(ev.Time) // the first event after a heartbeat: behind again
	}
	switch ev.Kind {
	case binlog.KindRows:
		if ev.XID != "" {
			l.asm.holdXA(ev) // published at its XA COMMIT
			return nil
		}
		if l.asm.replaying(ev.GTID) {
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
		// reader (catch-up; a hand-off clears it) is due now, not at
		// max_wait.
		l.batch.quiet = false
		return l.commitDue(ctx)
	case binlog.KindPrepare, binlog.KindRollback:
		if n := len(l.txn.records); n > 0 {
			// An XA group's rows are held by xid (holdXA), never pending.
			return fmt.Errorf("%w: %d outbox rows of %s outside its XA transaction at its XA %s", binlog.ErrUnframed,
				n, l.asm.cur.gtid, map[binlog.Kind]string{binlog.KindPrepare: "PREPARE", binlog.KindRollback: "ROLLBACK"}[ev.Kind])
		}
		if ev.Kind == binlog.KindPrepare {
			l.asm.prepareXA(ev, l.pos.at())
		} else {
			l.asm.endXA(ev.XID)
		}
		l.advance(ev, false)
	case binlog.KindCommit:
		if ev.XID != "" {
			if err := l.commitXA(ctx, ev); err != nil {
				return err
			}
		}
		if err := l.flushPending(ctx, false); err != nil {
			return err
		}
		l.advance(ev, ev.Digest != nil && ev.XID == "" && !l.asm.replaying(ev.GTID))
		sealNow, due := l.batch.ended(ev.Time, caughtUp, l.sealing)
		switch {
		case sealNow:
			return l.startCommit(ctx)
		case due:
			return l.commitDue(ctx)
		}
	}
	return nil
}

// commitXA publishes the held rows of the XA transaction ev commits (XA
// COMMIT, or a one-phase commit) as rows of ev's transaction; one prepared
// before the position the relay first started from is looked up
// (unknownXA).
func (l *loop) commitXA(ctx context.Context, ev *binlog.Event) error {
	rows, known, err := l.asm.commitXA(ev, l.pos.partial)
	if err != nil {
		return err
	}
	if !known {
		// The lookup may take minutes (the server's binlogs, page by page):
		// what ended before this XA COMMIT (its own group) is committed
		// first, so that no Kafka transaction stays open through it (the
		// broker would abort it, and every attempt would look again) and a
		// stop leaves the checkpoint just before it.
		if err := l.commitEnded(ctx); err != nil {
			return err
		}
		return l.unknownXA(ctx, ev)
	}
	for i := range rows {
		if err := l.rows(ctx, &rows[i]); err != nil {
			return err
		}
	}
	l.asm.endXA(ev.XID)
	return nil
}

// commitDue: the open batch is due; it is committed now, or as soon as the
// one in flight ends.
func (l *loop) commitDue(ctx context.Context) error {
	if !l.batch.due(l.sealing) {
		return nil
	}
	return l.startCommit(ctx)
}

// advance moves the position past ev, the end of a source transaction (a
// commit, an XA prepare or an XA rollback); fingerprinted: see
// position.advance.
func (l *loop) advance(ev *binlog.Event, fingerprinted bool) {
	l.r.metrics.SourceTransactions.Inc()
	l.pos.advance(ev, fingerprinted)
	l.asm.leave()
	l.r.metrics.SourceRead(ev.Time) // behind until the reader passes on a heartbeat
	l.asm.advanced(ev.Set)
}

func (l *loop) onTick(ctx context.Context, now time.Time) error {
	if err := l.topics.place.changedWhileRunning(); err != nil {
		return err
	}
	l.progress(now)
	if l.batch.limit.recover(now) {
		l.r.limit = l.batch.limit.max
		l.r.log.Info().Int("batch_limit", l.batch.limit.max).Int("max_records", l.batch.limit.full).Msg("kafka keeps up again: larger batches")
	}
	if l.batch.tick(l.sealing, l.asm.replays()) {
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
	if interval <= 0 || now.Sub(l.prog.at) < interval {
		return
	}
	n := l.pos.events - l.prog.events
	if n > 0 {
		el := now.Sub(l.prog.at).Seconds()
		// rounded: a tenth of an event per second, a millisecond of lag
		ev := l.r.log.Info().Int64("events", n).Float64("events_per_second", math.Round(float64(n)/el*10)/10)
		if lag := l.r.metrics.LagSeconds(); !math.IsNaN(lag) {
			ev = ev.Float64("lag_seconds", math.Round(lag*1000)/1000)
		}
		ev.Str("gtid_set", l.pos.String()).Msg("progress")
	}
	l.prog = progress{at: now, events: l.pos.events}
}

// written notes a checkpoint the delivery wrote (nil: none).
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
	l.txn.drop() // the transaction being read: read again from the checkpoint
	if err := l.commitEnded(ctx); err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	cp, err := l.d.stop(ctx, true)
	if err != nil {
		return fmt.Errorf("write final checkpoint: %w", err)
	}
	l.written(cp)
	l.r.log.Info().Str("gtid_set", l.pos.String()).Int64("events", l.pos.events).Msg("final checkpoint written")
	return nil
}

// commitEnded commits, and waits for, what the loop holds of the source
// transactions that ended (the batch, or only a position that moved), if
// anything. The pending records of the transaction being read stay out.
func (l *loop) commitEnded(ctx context.Context) error {
	if err := l.awaitCommit(ctx); err != nil {
		return err
	}
	if l.batch.open() || (l.pos.dirty && !l.asm.replays()) {
		return l.commit(ctx)
	}
	return nil
}

var errSourceStream = errclass.New(errclass.Transient, "binlog", "binlog stream ended")
