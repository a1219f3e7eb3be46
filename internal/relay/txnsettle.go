package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// Settling after a commit.
//
// Apache Kafka answers EndTxn once the coordinator has logged PrepareCommit;
// it writes the commit markers and CompleteCommit afterwards (about 1-2 ms on
// a local broker). A produce that adds a partition to the next transaction
// before that is answered CONCURRENT_TRANSACTIONS: under transaction protocol
// v2 (KIP-890 part 2, the default of Kafka 4 clusters) the broker retries it
// itself after add.partitions.to.txn.retry.backoff.ms (20 ms by default),
// under v1 franz-go retries AddPartitionsToTxn after its
// ConcurrentTransactionsBackoff (20 ms). Either way a relay that begins its
// next transaction at once pays 20 ms per transaction (measured with
// `bench txn -back-to-back`: 22.5 ms per one-record transaction, 2.1 ms when
// the next produce waits for the coordinator to complete the commit).
//
// So after each commit the lane's goroutine asks the coordinator
// (DescribeTransactions, one cheap request) until the transaction is
// CompleteCommit (or Empty), at most settleMax; the lane's next
// transaction's first produce waits for that answer. This only moves when the next produce is sent: the
// commit's outcome is already known, and a failed or slow answer (an old
// broker, no DESCRIBE permission on the transactional id) only means the
// produce goes out unwaited, as before. Kafka's own retry keeps it correct.
//
// Only after a batch that ended where the reader caught up (latency-bound).
// A batch cut by kafka.batch.max_records or max_bytes has more records
// behind it: the loop routes them while the broker's back-off runs, and the
// questions (one every settlePoll until complete, longer on a busy broker)
// cost the broker CPU that bulk catch-up needs (on Apache Kafka, 2,000,000
// rows in 200-row INSERTs: about 0.5 CPU s, the whole difference in broker
// CPU between exactly-once and at-least-once).

// settleMax bounds one settle wait: the broker's retry backoff tops out at
// 100 ms (add.partitions.to.txn.retry.backoff.max.ms).
const settleMax = 50 * time.Millisecond

// settlePoll is the pause between two questions to the coordinator.
const settlePoll = 500 * time.Microsecond

// settleGiveUp is how many settle waits in a row may fail (an error, or no
// complete commit within settleMax) before the lane stops asking for
// settlePause: a coordinator slower than settleMax would cost each
// transaction more than the broker's back-off it saves, a loading or moving
// coordinator (a broker restart) only for a moment. After the pause it asks
// again. Refusals (authorization, an unsupported request) end the asking
// for the attempt.
const (
	settleGiveUp = 5
	settlePause  = 30 * time.Second
)

// settleAnswer is how one settle wait ended.
type settleAnswer int

const (
	settleDone   settleAnswer = iota // complete
	settleFailed                     // an error or out of time: maybe passing
	settleNever                      // not allowed or not supported: stop asking
)

// settling is a lane's settle wait and what it learned of the
// coordinator's answers. The lane's goroutine asks (settleNow) and hands
// the answer over through done, set under the delivery's mutex
// (exactlyonce.go); the lane's next begin takes it and keeps the counts.
type settling struct {
	// done is closed once the wait after the last commit has ended, its
	// answer in answer; nil when none is awaited.
	done   chan struct{}
	answer settleAnswer
	off    bool      // the coordinator cannot answer: do not ask
	fails  int       // settle waits failed in a row
	paused time.Time // no settle wait before this time (too many failed in a row)
	warned bool      // that was logged in this attempt
	txnID  string    // the client's transactional id, once looked up
	waits  atomic.Int64
}

// settleWanted reports whether the lane asks the coordinator after the
// commit it just made (not turned off nor paused; a transactional id).
func (s *lane) settleWanted() bool {
	st := &s.settle
	if st.off || time.Now().Before(st.paused) {
		return false
	}
	if st.txnID == "" {
		id, _ := s.cl.OptValue(kgo.TransactionalID).(string)
		if id == "" {
			st.off = true
			return false
		}
		st.txnID = id
	}
	return true
}

// settleNow asks the coordinator whether the transaction just committed is
// complete, for at most settleMax, and closes done with the answer.
func (s *lane) settleNow(done chan struct{}) {
	ctx, cancel := context.WithTimeout(s.pctx, settleMax)
	defer cancel()
	s.settle.answer = s.askSettled(ctx)
	traceSettled(s)
	close(done)
}

// askSettled asks until the transaction is complete, ctx ends, or an
// answer says it cannot be told.
func (s *lane) askSettled(ctx context.Context) settleAnswer {
	id := s.settle.txnID
	for {
		t, err := describeTxn(ctx, s.adm, id)
		if err == nil {
			switch t.State {
			case "CompleteCommit", "CompleteAbort", "Empty":
				return settleDone
			}
		}
		if err != nil && (kafkaerr.KindOf(err) != kafkaerr.Retriable || ctx.Err() != nil) {
			return settleVerdict(ctx, err)
		}
		// Not complete yet, or a passing error (the coordinator
		// loading, moving): ask again within settleMax.
		select {
		case <-ctx.Done():
			return settleFailed // out of time
		case <-time.After(settlePoll):
		}
	}
}

// describeTxn is the coordinator's state of transactional id id.
func describeTxn(ctx context.Context, adm *kadm.Client, id string) (kadm.DescribedTransaction, error) {
	d, err := adm.DescribeTransactions(ctx, id)
	if err != nil {
		return kadm.DescribedTransaction{}, err
	}
	t, ok := d[id]
	switch {
	case !ok:
		return t, errors.New("no state for the transactional id")
	case t.Err != nil:
		return t, t.Err
	}
	return t, nil
}

// settleVerdict classifies a failed question: by property (authorization,
// an unsupported request), not by a list of transient errors.
func settleVerdict(ctx context.Context, err error) settleAnswer {
	if ctx.Err() != nil {
		// Out of time: a coordinator slower than settleMax costs more
		// than the broker's retry back-off it saves; a failure in a row.
		return settleFailed
	}
	if kafkaerr.Unsupported(err) || kafkaerr.Denied(err) {
		return settleNever
	}
	return settleFailed
}

// awaitSettled waits for the settle wait after the lane's last commit, if
// any (it is bounded by settleMax), and notes how it went.
func (s *lane) awaitSettled() {
	st := &s.settle
	if st.done == nil {
		return
	}
	<-st.done
	st.done = nil
	st.waits.Add(1)
	switch st.answer {
	case settleDone:
		st.fails = 0
		return
	case settleFailed:
		if st.fails++; st.fails < settleGiveUp {
			return
		}
		st.fails = 0
		st.paused = time.Now().Add(settlePause)
		if !st.warned {
			st.warned = true
			s.log.Warn().Str("transactional_id", st.txnID).Dur("pause", settlePause).
				Msg("the transaction coordinator did not report commits complete in time: the next transactions do not wait for it (each may wait for the broker's retry back-off, about 20 ms); asking again after the pause")
		}
		return
	}
	st.off = true
	s.log.Warn().Str("transactional_id", st.txnID).
		Msg("the transaction coordinator refuses DescribeTransactions: each exactly-once transaction may wait for the broker's retry back-off (about 20 ms); grant DESCRIBE on the transactional id")
}
