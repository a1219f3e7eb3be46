package relay

import (
	"context"
	"errors"
	"time"

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
// So after each commit the sink asks the coordinator (DescribeTransactions,
// one cheap request) until the transaction is CompleteCommit (or Empty), at
// most settleMax, in a goroutine; the next transaction's first produce waits
// for that answer. This only moves when the next produce is sent: the
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
// complete commit within settleMax) before the sink stops asking for
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

// settleAfterCommit starts asking the coordinator whether the transaction
// just committed is complete; begin waits for the answer.
func (s *exactlyOnceSink) settleAfterCommit() {
	if s.settleOff || time.Now().Before(s.settlePaused) {
		return
	}
	if s.txnID == "" {
		id, _ := s.cl.OptValue(kgo.TransactionalID).(string)
		if id == "" {
			s.settleOff = true
			return
		}
		s.txnID = id
	}
	done := make(chan settleAnswer, 1)
	s.settled = done
	started := s.group.start(func() {
		ctx, cancel := context.WithTimeout(s.pctx, settleMax)
		defer cancel()
		for {
			d, err := s.adm.DescribeTransactions(ctx, s.txnID)
			if err == nil {
				t, ok := d[s.txnID]
				switch {
				case !ok:
					err = errors.New("no state for the transactional id")
				case t.Err != nil:
					err = t.Err
				}
				if err == nil {
					switch t.State {
					case "CompleteCommit", "CompleteAbort", "Empty":
						done <- settleDone
						return
					}
				}
			}
			if err != nil && (kafkaerr.KindOf(err) != kafkaerr.Retriable || ctx.Err() != nil) {
				done <- settleVerdict(ctx, err)
				return
			}
			// Not complete yet, or a passing error (the coordinator
			// loading, moving): ask again within settleMax.
			select {
			case <-ctx.Done():
				done <- settleFailed // out of time
				return
			case <-time.After(settlePoll):
			}
		}
	})
	if !started {
		s.settled = nil // the attempt is over: nothing to wait for
	}
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

// awaitSettled waits for the answer settleAfterCommit started asking for,
// if any; it is bounded by settleMax.
func (s *exactlyOnceSink) awaitSettled() {
	if s.settled == nil {
		return
	}
	answer := <-s.settled
	s.settled = nil
	s.settleWaits.Add(1)
	switch answer {
	case settleDone:
		s.settleFails = 0
		return
	case settleFailed:
		if s.settleFails++; s.settleFails < settleGiveUp {
			return
		}
		s.settleFails = 0
		s.settlePaused = time.Now().Add(settlePause)
		if !s.settleWarned {
			s.settleWarned = true
			s.log.Warn().Str("transactional_id", s.txnID).Dur("pause", settlePause).
				Msg("the transaction coordinator did not report commits complete in time: the next transactions do not wait for it (each may wait for the broker's retry back-off, about 20 ms); asking again after the pause")
		}
		return
	}
	s.settleOff = true
	s.log.Warn().Str("transactional_id", s.txnID).
		Msg("the transaction coordinator refuses DescribeTransactions: each exactly-once transaction may wait for the broker's retry back-off (about 20 ms); grant DESCRIBE on the transactional id")
}
