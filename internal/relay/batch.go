package relay

import (
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// The batch policy: when the open batch ends. A batch holds the records of
// source transactions that ended (and parts of one larger than a batch);
// it ends at a source transaction boundary when one of these holds:
//
//   - its bound: kafka.batch.max_records (the adaptive limit below) or
//     max_bytes;
//   - kafka.batch.max_wait since its first record (or, exactly-once, half
//     kafka.transaction_timeout, so that the broker never aborts it);
//   - the reader has caught up with the source (latency): the batch ends
//     as soon as the reader has nothing more; far behind the source
//     (catch-up: the loop caught up with the reader for a moment, not with
//     the source) only once the reader stays quiet for the quiet window,
//     or at the bounds;
//   - a heartbeat: with no batch open and the position moved or not, a
//     checkpoint-only batch every kafka.checkpoint_interval.
//
// A batch that becomes due while the one before it is still being
// committed (a seal in flight) ends as soon as that one has (want).
//
// The policy is a value of the loop's goroutine with an injected clock:
// batch_test.go tables its decisions.

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

// batchPolicy is the open batch and the rules that end it.
type batchPolicy struct {
	clock    func() time.Time
	maxBytes int
	maxWait  time.Duration
	// heartbeat is kafka.checkpoint_interval; txnLimit how long a batch
	// may stay open before its Kafka transaction nears the broker's
	// timeout (exactly-once: kafka.transaction_timeout; 0: no bound).
	heartbeat, txnLimit time.Duration
	limit               batchLimit

	records, bytes int       // the open batch's
	start          time.Time // when its first record joined
	part           bool      // it holds a part of a split transaction
	topics         map[topicOutcome]int
	// run counts the records joined last of one topic and outcome, not yet
	// in topics (the records of a stream of one-row transactions go to
	// one topic: a comparison each, not a map update).
	run      topicOutcome
	runCount int
	lastSeal time.Time
	// quiet: the batch is due once the reader stays quiet for the quiet
	// window (catch-up); want: it is due as soon as the seal in flight
	// has been answered.
	quiet, want bool
}

// newBatchPolicy is the policy of k's batches, starting at records (the
// relay's current bound); clock is the time (time.Now, or a test's).
func newBatchPolicy(k config.Kafka, records int, clock func() time.Time) batchPolicy {
	now := clock()
	b := batchPolicy{clock: clock, maxBytes: k.Batch.MaxBytes, maxWait: k.Batch.MaxWait, heartbeat: k.CheckpointInterval,
		topics: map[topicOutcome]int{}, lastSeal: now}
	if k.Delivery == config.ExactlyOnce {
		b.txnLimit = k.TransactionTimeout
	}
	b.limit = batchLimit{full: k.Batch.MaxRecords}
	b.limit.set(records, now)
	return b
}

// open reports whether the batch holds records.
func (b *batchPolicy) open() bool { return b.records > 0 }

// full reports whether the batch reached its size bound.
func (b *batchPolicy) full() bool { return b.records >= b.limit.max || b.bytes >= b.maxBytes }

// fillsAlone reports whether n records of bytes bytes (the transaction
// being read) reach the bound alone: that transaction is committed in
// parts.
func (b *batchPolicy) fillsAlone(n, bytes int) bool { return n >= b.limit.max || bytes >= b.maxBytes }

// over reports whether the batch and n records of bytes bytes (the
// transaction being read) together reach the bound: the ended transactions
// are committed, and the one being read stays whole.
func (b *batchPolicy) over(n, bytes int) bool {
	return b.records+n >= b.limit.max || b.bytes+bytes >= b.maxBytes
}

// join adds n records of bytes bytes, by topic and outcome in to, to the
// batch; part says they are a part of a split transaction.
func (b *batchPolicy) join(n, bytes int, part bool) {
	if b.records == 0 {
		b.start = b.clock()
	}
	b.records += n
	b.bytes += bytes
	b.part = b.part || part
}

// counted counts a record of the batch to its topic and outcome.
func (b *batchPolicy) counted(to topicOutcome) {
	if b.runCount > 0 && to == b.run {
		b.runCount++
		return
	}
	b.endRun()
	b.run, b.runCount = to, 1
}

// endRun moves the run's count into topics.
func (b *batchPolicy) endRun() {
	if b.runCount > 0 {
		b.topics[b.run] += b.runCount
		b.runCount = 0
	}
}

// ended is what a source transaction's end makes of the batch, ev its end
// (commit time), caughtUp whether the reader has nothing more, sealing
// whether a seal is in flight: sealNow (at a bound or past max_wait), due
// (caught up; or, with a seal in flight, once it has been answered), or
// neither (catch-up: due once the reader stays quiet, see quiet).
func (b *batchPolicy) ended(commitTime time.Time, caughtUp, sealing bool) (sealNow, due bool) {
	if !b.open() {
		return false, false // a checkpoint-only transaction waits for the tick
	}
	now := b.clock()
	if b.full() || now.Sub(b.start) >= b.maxWait {
		return true, false
	}
	if caughtUp && !b.want && now.Sub(commitTime) >= catchUpLag {
		// Far behind the source: the loop caught up with the reader for a
		// moment, not with the source. Committing at each such moment
		// makes hundreds of small Kafka transactions (each costs the
		// broker its markers and transaction-log writes); the batch
		// commits once the reader stays quiet, or at its bounds.
		b.quiet = true
		return false, false
	}
	return false, caughtUp || b.want
}

// quietOver reports whether the batch became due when the reader stayed
// quiet (catch-up), and forgets it.
func (b *batchPolicy) quietOver() bool {
	was := b.quiet
	b.quiet = false
	return was
}

// due reports whether the batch is sealed now (due); with a seal in
// flight it is noted as wanted instead.
func (b *batchPolicy) due(sealing bool) bool {
	if !b.open() {
		return false
	}
	if sealing {
		b.want = true
		return false
	}
	return true
}

// answered reports, once the seal in flight has been answered, whether
// the batch built meanwhile is sealed at once (it was due meanwhile).
func (b *batchPolicy) answered() bool {
	if !b.open() {
		b.want = false
		return false
	}
	return b.want
}

// tick is the periodic check: whether the batch (or, with none open and
// not replaying, a checkpoint-only heartbeat batch) is sealed now.
func (b *batchPolicy) tick(sealing, replaying bool) bool {
	if sealing {
		return false // bounded by the delivery's timeout; its end is handled in run
	}
	now := b.clock()
	if b.open() {
		// The batch holds ended transactions only (a part of a split one is
		// committed as soon as it joins): max_wait holds while a
		// transaction is being read too. A Kafka transaction open for half
		// its timeout is committed: one outbox row, then minutes of other
		// tables' rows, must not let the broker abort it.
		age := now.Sub(b.start)
		return age >= b.maxWait || b.txnLimit > 0 && age >= b.txnLimit/2
	}
	if replaying {
		return false // reading again what was published: the checkpoint stays
	}
	// Heartbeat: a checkpoint-only transaction, even when idle, so a
	// restart starts near the head, the binlogs it needs are not purged,
	// and the checkpoint's time shows the relay is alive.
	return now.Sub(b.lastSeal) >= b.heartbeat
}

// sealed starts the next batch once the open one is sealed at now, and
// returns the ended one's records, their count by topic and outcome, and
// whether it holds a part of a split transaction.
func (b *batchPolicy) sealed(now time.Time) (records int, topics map[topicOutcome]int, part bool) {
	b.endRun()
	records, topics, part = b.records, b.topics, b.part
	b.records, b.bytes, b.part, b.want = 0, 0, false, false
	b.topics = make(map[topicOutcome]int, len(topics))
	b.lastSeal = now
	return records, topics, part
}

// Batch bound after a slow broker: see batchlimit.go.

// batchLimit is the records bound of the loop's batches: max, at most full
// (kafka.batch.max_records), since when it is, and when a wait on Kafka
// was last slow.
type batchLimit struct {
	max, full       int
	since, lastSlow time.Time
}

func (l *batchLimit) set(records int, now time.Time) { l.max, l.since = records, now }

// slow notes a wait on Kafka that was slow at t (zero: none).
func (l *batchLimit) slow(t time.Time) {
	if t.After(l.lastSlow) {
		l.lastSlow = t
	}
}

// recover doubles the bound, up to full, once waits on Kafka have been
// fast for batchRecovery, and reports whether it did.
func (l *batchLimit) recover(now time.Time) bool {
	if l.max >= l.full {
		return false
	}
	since := l.since
	if l.lastSlow.After(since) {
		since = l.lastSlow // a wait on Kafka was slow since (the committed stream says when)
	}
	if now.Sub(since) < batchRecovery {
		return false
	}
	l.set(min(2*l.max, l.full), now)
	return true
}

// batchRecovery is how long commits must stay fast before the bound doubles
// (batchLimit.recover, batch.go).
const batchRecovery = time.Minute
