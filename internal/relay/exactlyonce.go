package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/ha"
)

// The exactly-once delivery (kafka.delivery exactly-once).
//
// A batch is one Kafka transaction whose last record is its checkpoint. Its
// commit is round trips (the last produce acknowledgements, EndTxn, the
// wait for the coordinator to complete it: txnsettle.go), so it runs on the
// goroutine of the lane that holds the batch while the pipeline reads and
// routes on. The records sent meanwhile belong to the next Kafka
// transaction: they are held, not produced, until the commit in flight has
// ended, then produced into the next transaction. A batch is still one
// Kafka transaction ending with its checkpoint; at most one commit is in
// flight (the pipeline ends the next batch only once the committed stream
// has answered); what is held is at most one batch (kafka.batch limits); a
// failed commit ends the attempt, which resumes from the last committed
// checkpoint, and a crash loses only what was never committed.
//
// Two lanes (kafka.transaction_lanes 2, the default): batches alternate
// between two lanes, each a producer with a transactional id of its own
// (checkpoint.TransactionalIDs). Once the batch in flight is flushed (every
// record of it acknowledged, before its EndTxn), the other lane's goroutine
// produces the held records into its own transaction, and the records sent
// after go there at once: they land after all of the batch's records in
// every partition, so read_committed consumers see them in order, and the
// commit markers and the coordinator's completion of one transaction no
// longer stand between two batches. The order of commits is kept: a batch
// commits only after the one before it has committed; when that one fails,
// the attempt ends and stop aborts the other lane's open transaction, so no
// checkpoint ever covers a batch that was not committed. "Committed" is the
// client's answer, but for a lane's first commit of each topic (its first
// transaction of an attempt writes topics all new to its client), which
// franz-go can end without sending EndTxn: that one is reported only once
// its checkpoint record is read back committed (laneproof.go), or the next
// lane's checkpoint would cover a batch the broker later aborts.

// exactlyOnce is the exactly-once delivery.
type exactlyOnce struct {
	lanes   []*lane
	timeout time.Duration
	acct    *accounting
	out     chan committed

	// mu guards what follows and the producing state of the lane the open
	// batch goes to: the pipeline's send and the lane goroutine that
	// releases the held records take it.
	mu       sync.Mutex
	cur      int         // the lane the open batch goes to
	held     []outRecord // records of the open batch not yet produced
	inflight *commitJob  // the batch whose commit runs; nil: none
}

// commitJob is a batch whose commit runs on its lane's goroutine.
type commitJob struct {
	ctx  context.Context // the pipeline's work context
	lane *lane
	seal *seal
	// released: the held records were produced into the other lane (two
	// lanes, once this batch was flushed); releaseErr is what that
	// produce failed with.
	released   bool
	releaseErr error
	at         time.Time // when it was sealed
}

// laneJob is a lane goroutine's work: a batch to commit, or the records
// held behind release's batch to produce into this lane.
type laneJob struct {
	commit  *commitJob
	release *commitJob
}

// releaseChunk is how many held records are produced before they are sent
// on without waiting for the producer's linger (produceHeld).
const releaseChunk = 2048

// newExactlyOnce is the delivery over lanes (one or two), counted in m.
func newExactlyOnce(lanes []*lane, m *accounting) *exactlyOnce {
	// One answer per seal, one seal in flight: the lane goroutine never
	// waits for the pipeline to take it.
	return &exactlyOnce{lanes: lanes, timeout: lanes[0].timeout, acct: m, out: make(chan committed, 1)}
}

func (d *exactlyOnce) committed() <-chan committed { return d.out }

// send hands b's records to the open batch (produced into the current
// lane's transaction, or held behind the commit in flight) and, with
// b.seal, starts the batch's commit on its lane's goroutine and makes the
// other lane current. The pipeline seals only once the previous commit has
// answered on the committed stream.
func (d *exactlyOnce) send(ctx context.Context, b part) (bool, error) {
	d.mu.Lock()
	var err error
	if j := d.inflight; j != nil && !j.released {
		for _, p := range b.records {
			traceSend(p.rec.Record, true, nil)
			d.held = append(d.held, p.rec)
		}
	} else {
		ln := d.lanes[d.cur]
		for _, p := range b.records {
			traceSend(p.rec.Record, false, ln)
			if err = ln.produce(p.rec); err != nil {
				break
			}
		}
	}
	if err != nil || b.seal == nil {
		d.mu.Unlock()
		return false, err
	}
	j := &commitJob{ctx: ctx, lane: d.lanes[d.cur], seal: b.seal, at: time.Now()}
	d.inflight = j
	d.cur = (d.cur + 1) % len(d.lanes)
	d.mu.Unlock()
	j.lane.jobs <- laneJob{commit: j}
	// The commit starts now, not when the pipeline next waits: the lane's
	// goroutine is queued behind the one that woke it (the pipeline, busy
	// routing), and with the reader busy on the other processor it could
	// wait for the scheduler to preempt the pipeline (10 ms or more)
	// before its flush began.
	runtime.Gosched()
	return true, nil
}

// run runs a goroutine per lane until ctx ends. A lease lost (ctx's cause)
// fails the records buffered and not yet sent at once, so that nothing
// goes out once the lease is not certain.
func (d *exactlyOnce) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, ln := range d.lanes {
		wg.Go(func() { d.work(ctx, ln) })
	}
	<-ctx.Done()
	if errors.Is(context.Cause(ctx), ha.ErrLeaseLost) {
		for _, ln := range d.lanes {
			ln.abortBuffered()
		}
	}
	wg.Wait()
	d.answerUnbegun(ctx)
	return nil
}

// answerUnbegun answers a commit handed to a lane whose goroutine ended
// first (ctx ended with the job still queued: the goroutine's select may
// take either): it was never begun, nothing of it is committed, and the
// pipeline, which seals again only once the commit in flight has answered,
// would wait for its answer forever (settleInflight). Called once every
// lane goroutine has returned.
func (d *exactlyOnce) answerUnbegun(ctx context.Context) {
	for _, ln := range d.lanes {
		for len(ln.jobs) > 0 {
			j := <-ln.jobs
			if j.commit == nil {
				continue
			}
			d.mu.Lock()
			if d.inflight == j.commit {
				d.inflight = nil
			}
			d.mu.Unlock()
			c := committed{err: fmt.Errorf("commit batch: not begun, the attempt ended first: %w", context.Cause(ctx))}
			select {
			case d.out <- c:
			default: // an answer not yet read: no commit was waiting for this one
			}
		}
	}
}

// work is ln's goroutine: it commits ln's batches and takes the records
// held behind the other lane's batch once that one is flushed.
func (d *exactlyOnce) work(ctx context.Context, ln *lane) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-ln.jobs:
			if j.release != nil {
				d.release(j.release)
				continue
			}
			d.commit(ctx, ln, j.commit)
		}
	}
}

// commit commits j's batch on ln, then answers on the committed stream
// and, unless the batch was cut with more rows waiting, asks the
// coordinator whether the transaction is complete (ln's next transaction
// waits for that). Held records that go into ln itself (one lane) are
// produced once that wait is over.
func (d *exactlyOnce) commit(ctx context.Context, ln *lane, j *commitJob) {
	began := time.Now()
	var flushed func()
	if len(d.lanes) > 1 {
		next := d.lanes[(d.index(ln)+1)%len(d.lanes)]
		flushed = func() { next.jobs <- laneJob{release: j} }
	}
	cp, err := ln.commit(j.ctx, j.seal.cp, flushed)
	traceCommit(ln, j.at, began, ln.flushedAt, ln.checkedAt)
	took := time.Since(began)
	d.acct.ended(j.seal, took, err)
	c := committed{cp: cp, err: err, slow: slowSince(took, d.timeout, time.Now())}
	if err != nil {
		d.mu.Lock()
		d.inflight = nil
		d.mu.Unlock()
		d.answer(c)
		return
	}
	var settled chan struct{}
	if !j.seal.more && ln.settleWanted() {
		settled = make(chan struct{})
	}
	d.mu.Lock()
	ln.settle.done = settled // ln's next begin waits for it
	own := !j.released && len(d.held) > 0 && d.lanes[d.cur] == ln
	if !own {
		c.err = d.endInflight(j)
	}
	d.mu.Unlock()
	if !own {
		d.answer(c)
		if settled != nil {
			ln.settleNow(settled)
		}
		return
	}
	if settled != nil {
		ln.settleNow(settled)
	}
	d.mu.Lock()
	c.err = d.endInflight(j)
	d.mu.Unlock()
	d.answer(c)
}

// endInflight ends j, the commit in flight, that has committed: the
// records held behind it go into the current lane (unless they went at
// the flush). Call it with mu held.
func (d *exactlyOnce) endInflight(j *commitJob) error {
	d.inflight = nil
	if j.released {
		return j.releaseErr
	}
	return d.produceHeld()
}

// release produces the records held behind j, flushed, into the current
// (other) lane: the records sent from now on go there too. Nothing is left
// to do once j's commit has ended.
func (d *exactlyOnce) release(j *commitJob) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != j || j.released {
		return
	}
	j.released = true
	j.releaseErr = d.produceHeld()
}

// produceHeld produces the held records into the current lane, in the
// order sent. The producer lingers (clients.Kafka.Producer) so that a small
// batch goes out with its checkpoint in one request; a catch-up batch held
// behind a commit is thousands of records, produced in a burst of several
// milliseconds: each releaseChunk of them is sent at once (sendNow), so the
// broker takes them in while the rest are produced, instead of idling
// until the linger ends. Call it with mu held.
func (d *exactlyOnce) produceHeld() error {
	ln := d.lanes[d.cur]
	for i, rec := range d.held {
		if err := ln.produce(rec); err != nil {
			clear(d.held)
			d.held = d.held[:0]
			return err
		}
		d.held[i] = outRecord{}
		if (i+1)%releaseChunk == 0 {
			ln.sendNow()
		}
	}
	d.held = d.held[:0]
	return nil
}

// answer sends c on the committed stream. The pipeline reads the answer
// to every seal it made (it waits for the seal in flight before it
// returns, whatever ended it), and the stream holds one: the send never
// waits.
func (d *exactlyOnce) answer(c committed) { d.out <- c }

func (d *exactlyOnce) index(ln *lane) int {
	for i, l := range d.lanes {
		if l == ln {
			return i
		}
	}
	return 0
}

// stop: clean, the last checkpoint (in either lane) is waited for until
// read_committed readers see it; otherwise the lanes' open transactions
// are aborted. The lanes' goroutines have ended (run).
func (d *exactlyOnce) stop(ctx context.Context, clean bool) (*checkpoint.Checkpoint, error) {
	if clean {
		for _, ln := range d.lanes {
			if err := ln.awaitVisible(ctx); err != nil {
				ln.log.Warn().Err(err).Msg("final checkpoint committed; readers see it once an older open transaction on the checkpoint topic ends")
				break
			}
		}
		return nil, nil
	}
	d.mu.Lock()
	clear(d.held)
	d.held = d.held[:0]
	d.mu.Unlock()
	var err error
	for _, ln := range d.lanes {
		err = errors.Join(err, ln.abort(ctx))
	}
	return nil, err
}
