package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Commit pipelining (exactly-once).
//
// A Kafka commit is round trips: the last produce acknowledgements, EndTxn,
// and the wait for the coordinator to complete it (txnsettle.go). The loop
// does not sit idle through them: startCommit closes the batch (its
// checkpoint names the position reached, exactly as before) and the sink
// commits it in a goroutine, while the loop goes on reading and routing. The
// records routed meanwhile belong to the next Kafka transaction: they are
// held, not produced, until the commit in flight has ended, then produced
// into the next transaction. Nothing else changes: a batch is still one
// Kafka transaction whose last record is its checkpoint; at most one commit
// is in flight; what is held is at most one batch (kafka.batch limits);
// a failed commit ends the attempt, which resumes from the last committed
// checkpoint, and a crash loses only what was never committed. Only the
// goroutine touches the sink while a commit is in flight (the loop only
// creates topics), and the loop waits for it before it returns.
//
// Two lanes (kafka.transaction_lanes 2, the default): the loop alternates
// between two sinks, each a producer with a transactional id of its own
// (checkpoint.TransactionalIDs). Once the batch in flight is flushed (every
// record of it acknowledged, before its EndTxn), the records held and those
// routed after go into the other lane's transaction at once: they land
// after all of the batch's records in every partition, so read_committed
// consumers see them in order, and the commit markers and the coordinator's
// completion of one transaction no longer stand between two batches. The
// order of commits is kept: a batch commits only after the one before it
// has committed (startCommit waits for it); when that one fails, the attempt
// ends and its caller aborts the other lane's open transaction, so no
// checkpoint ever covers a batch that was not committed.

// inflightCommit is a batch whose Kafka commit is running.
type inflightCommit struct {
	done <-chan commitResult
	// flushed is closed once the batch is acknowledged (two lanes only;
	// nil with one); released: the loop then produced the held records
	// into the other lane.
	flushed  chan struct{}
	released bool
	lane     sink // the sink committing it
	cp       *checkpoint.Checkpoint
	records  int
	topics   map[topicOutcome]int
	partial  bool // it commits part of the source transaction being read
}

type commitResult struct {
	written *checkpoint.Checkpoint
	err     error
	took    time.Duration // the sink's commit alone (flush, EndTxn, settle start)
}

// batchOpen reports whether the batch being built holds records.
func (l *loop) batchOpen() bool {
	if l.inflight != nil && l.inflight.lane == l.sink {
		return len(l.held) > 0 // the sink's open transaction is the one committing
	}
	return len(l.held) > 0 || l.sink.isOpen()
}

// send adds rec to the batch being built: produced at once, or held while
// the previous batch's commit is in flight (with two lanes: until the loop
// has seen that batch flushed, between two hand-offs of the reader).
func (l *loop) send(ctx context.Context, rec outRecord) error {
	if j := l.inflight; j != nil && !j.released {
		l.held = append(l.held, rec)
		return nil
	}
	return l.sink.produce(ctx, rec)
}

// inflightFlushed is the channel the commit in flight closes once its batch
// is acknowledged; nil (never ready) without one, with one lane, or once the
// held records are released.
func (l *loop) inflightFlushed() <-chan struct{} {
	if l.inflight == nil || l.inflight.released {
		return nil
	}
	return l.inflight.flushed
}

// release produces the records held behind the flushed batch in flight
// into the current (other) lane's transaction, in the order routed.
func (l *loop) release(ctx context.Context) error {
	l.inflight.released = true
	return l.produceHeld(ctx)
}

// produceHeld produces the held records into the current lane. Exactly-once
// the producer lingers (clients.Kafka.Producer) so that a small
// batch goes out with its checkpoint in one request; a catch-up batch held
// behind a commit is thousands of records, produced in a burst of several
// milliseconds: each releaseChunk of them is sent at once (sendNow), so the
// broker takes them in while the loop produces the rest, instead of idling
// until the linger ends.
func (l *loop) produceHeld(ctx context.Context) error {
	for i, rec := range l.held {
		if err := l.sink.produce(ctx, rec); err != nil {
			return err
		}
		l.held[i] = outRecord{}
		if (i+1)%releaseChunk == 0 {
			l.sink.sendNow()
		}
	}
	l.held = l.held[:0]
	return nil
}

// releaseChunk is how many held records produceHeld produces before it
// sends them on without waiting for the linger.
const releaseChunk = 2048

// nextLane makes the other lane current, when there are two.
func (l *loop) nextLane() {
	for i, s := range l.lanes {
		if s == l.sink {
			l.sink = l.lanes[(i+1)%len(l.lanes)]
			return
		}
	}
}

// inflightDone is the channel the commit in flight answers on; nil (never
// ready) when there is none.
func (l *loop) inflightDone() <-chan commitResult {
	if l.inflight == nil {
		return nil
	}
	return l.inflight.done
}

// commit ends the open batch (or writes a checkpoint-only batch) with the
// current position and waits until it is committed.
func (l *loop) commit(ctx context.Context) error {
	if err := l.startCommit(ctx); err != nil {
		return err
	}
	return l.awaitCommit(ctx)
}

// startCommit ends the open batch (or writes a checkpoint-only batch) with
// the current position. Exactly-once it returns once the commit is running
// (after the previous one ended); its end is handled by committed or
// awaitCommit.
func (l *loop) startCommit(ctx context.Context) error {
	if err := l.awaitCommit(ctx); err != nil {
		return err
	}
	l.wantCommit = false
	now := time.Now()
	cp := &checkpoint.Checkpoint{
		Name:        l.r.cfg.Name,
		GTIDSet:     l.position(),
		Flavor:      l.srv.Flavor,
		ServerID:    l.srv.ServerID,
		Host:        l.srv.Addr,
		SourceUID:   l.srv.UID,
		Tables:      l.r.tables,
		CommitTime:  l.lastCommitTime,
		Time:        now.UTC(),
		Events:      l.events + int64(l.batchRecords),
		Schema:      l.schema,
		Unsigned:    l.unsigned,
		Provisional: l.provisional,
		XA:          l.xaCheckpoint(),
		Partitions:  l.sink.placements().snapshot(),
		Fingerprint: l.lastFingerprint(),
	}
	if l.partial.GTID != "" {
		p := l.partial
		cp.Partial = &p
	}
	job := &inflightCommit{cp: cp, records: l.batchRecords,
		topics: l.batchTopics, partial: l.batchPart}
	l.batchPart = false
	l.batchTopics = make(map[topicOutcome]int, len(job.topics))
	// A batch cut by its size bound with rows already handed over behind it
	// (catch-up): the next transaction does not wait for the coordinator to
	// complete this one. Its first produce may meet the broker's retry
	// back-off (about 20 ms, CONCURRENT_TRANSACTIONS) while the loop routes
	// those rows; asking every 0.5 ms costs the broker more CPU than that
	// wait. At the head (nothing handed over behind it) it always waits.
	settle := !(l.batchFull() || l.overBound()) || !l.moreRows
	l.lastBatch = l.batchRecords
	l.events = cp.Events
	l.batchRecords, l.batchBytes = 0, 0
	l.dirty = false
	l.lastCheckpoint = now
	if len(l.lanes) > 1 {
		job.flushed = make(chan struct{})
	}
	done, res := l.sink.seal(ctx, cp, settle, job.flushed)
	if done == nil {
		// Ended already (at-least-once: the checkpoint is written once the
		// batch is acknowledged; see drain).
		return l.finishCommit(job, res)
	}
	job.lane, job.done = l.sink, done
	l.inflight = job
	// The commit starts now, not when the loop next waits: a new goroutine
	// is queued behind the one that started it (the loop, busy routing), and
	// with the reader busy on the other processor it could wait for the
	// scheduler to preempt the loop (10 ms or more) before its flush began.
	runtime.Gosched()
	l.nextLane()
	return nil
}

// awaitCommit waits for the commit in flight, if any, and starts the next
// Kafka transaction with the records held meanwhile.
func (l *loop) awaitCommit(ctx context.Context) error {
	if l.inflight == nil {
		return nil
	}
	return l.ended(ctx, <-l.inflight.done)
}

// committed handles the end of the commit in flight, taken by run, and
// commits the batch built meanwhile at once when it is due and ends at a
// source transaction boundary.
func (l *loop) committed(ctx context.Context, res commitResult) error {
	if err := l.ended(ctx, res); err != nil {
		return err
	}
	if !l.batchOpen() {
		l.wantCommit = false
		return nil
	}
	if l.wantCommit {
		return l.startCommit(ctx) // the batch holds ended transactions only
	}
	return nil
}

// ended finishes the commit in flight with its result and produces the
// records held meanwhile into the next Kafka transaction.
func (l *loop) ended(ctx context.Context, res commitResult) error {
	job := l.inflight
	l.inflight = nil
	if err := l.finishCommit(job, res); err != nil {
		return err
	}
	return l.produceHeld(ctx)
}

// settleInflight waits, when the loop ends with err, for a commit still in
// flight (bounded by the sink's timeout) and accounts for its end; it
// returns the attempt's error. A commit that failed leaves the checkpoint
// behind what the loop handled after it, so it comes first: a fatal stop
// decided meanwhile (which names a transaction the checkpoint would not
// reach, and exits for good) becomes that commit's failure, and the next
// attempt reaches the stop again from the committed checkpoint; any other
// ending keeps both (a fence or a transaction time-out of the commit is
// seen through a stream error).
func (l *loop) settleInflight(err error) error {
	if job := l.inflight; job != nil {
		l.inflight = nil
		if cerr := l.finishCommit(job, <-job.done); cerr != nil {
			switch {
			case err == nil:
				err = cerr
			case fatal(err) && !errors.Is(err, ErrFenced):
				err = fmt.Errorf("commit batch in flight: %w (the loop stopped meanwhile, to be reached again: %v)", cerr, err)
			default:
				err = errors.Join(err, cerr)
			}
		}
	}
	clear(l.held)
	l.held = l.held[:0]
	return err
}

// finishCommit accounts for a commit that ended.
func (l *loop) finishCommit(job *inflightCommit, res commitResult) error {
	if res.err != nil {
		l.r.metrics.KafkaTransactions.WithLabelValues("abort").Inc()
		return res.err
	}
	l.r.metrics.KafkaTransactions.WithLabelValues("commit").Inc()
	if job.lane != nil { // it waited on Kafka: a Kafka transaction
		l.r.metrics.KafkaTxnSeconds.Observe(res.took.Seconds())
		l.tookCommit(res.took)
	}
	l.r.metrics.BatchRecords.Observe(float64(job.records))
	l.written(res.written)
	for to, n := range job.topics {
		c := l.topicCounters[to]
		if c == nil {
			c = l.r.metrics.Events.WithLabelValues(to.topic, to.outcome)
			l.topicCounters[to] = c
		}
		c.Add(float64(n))
	}
	if job.partial {
		hit("after-partial")
	} else {
		hit("after-commit")
	}
	return nil
}
